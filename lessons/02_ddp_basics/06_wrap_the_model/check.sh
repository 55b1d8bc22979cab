# Step 6's claims, on 3 processes: the replicas start different, and after wrapping every
# one holds rank 0's parameters, bit for bit; module() is the wrapped model.
[[ $(results before_wrapping | sort -u | wc -l) -eq 3 ]] || fail "the replicas should start different"
echo "ok: three different models before wrapping"
[[ $(results after_wrapping | wc -l) -eq 3 && $(results after_wrapping | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ after wrapping"
r0=$(result before_wrapping)
[[ $(result after_wrapping) == "$r0" ]] || fail "the common parameters are not rank 0's"
echo "ok: after wrapping all hold rank 0's parameters ($r0)"
expect_count 3 'ddp.module\(\) is the model it wraps: yes' "module() returns the wrapped model"
