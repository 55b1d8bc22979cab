# Step 3's claims: started as srun or as mpirun would start them, with no launcher, the
# processes find their ranks in the scheduler's variables and form one group.
for i in 0 1 2; do
  expect "^\[srun task $i\] started by slurm: rank $i of 3, local rank $i; all_reduce of ones = 3$" "srun task $i"
  expect "^\[mpirun task $i\] started by openmpi: rank $i of 3, local rank $i; all_reduce of ones = 3$" "mpirun task $i"
done
