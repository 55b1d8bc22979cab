# Step 6's claims, on 3 processes: the replicas start different, and after wrapping every
# one holds rank 0's parameters, bit for bit; module() is the wrapped model.
[[ $(fields 'before wrapping: parameters ([0-9a-f]+)' | sort -u | wc -l) -eq 3 ]] || fail "the replicas should start different"
echo "ok: three different models before wrapping"
[[ $(fields 'after wrapping:  parameters ([0-9a-f]+)' | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ after wrapping"
r0=$(field '^\[rank 0\] rank 0 before wrapping: parameters ([0-9a-f]+)')
[[ $(field 'after wrapping:  parameters ([0-9a-f]+)') == "$r0" ]] || fail "the common parameters are not rank 0's"
echo "ok: after wrapping all hold rank 0's parameters ($r0)"
expect_count 3 'ddp.module\(\) is the model it wraps: yes' "module() returns the wrapped model"
