# Step 3's claims, on 4 processes: the ranks are 0..3, each exactly once; every process
# sees the same world size; only rank 0 takes the logging role.
for r in 0 1 2 3; do
  expect_count 1 "^\[rank $r\] rank $r of world size 4 \(local rank $r of 4" "rank $r, once"
done
expect_count 4 'of world size 4 ' "all four agree on the world size"
expect_count 1 'I am rank 0' "one logger"
expect '^\[rank 0\] I am rank 0' "and it is rank 0"
