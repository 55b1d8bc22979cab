# Step 5's claims, on 2 processes whose halves of the batch differ on purpose:
# broadcast_buffers=true: rank 0's running statistics are exactly those of one process on
#   rank 0's rows alone; the others hold rank 0's plus their own last update (they differ).
# broadcast_buffers=false: each rank's are exactly those of its own rows alone.
# SyncBatchNorm: every rank's are the same bits, those of one process on all rows.
holds "d == 0" "broadcast_buffers=true: rank 0 holds the statistics of its own rows only" d="$(result broadcast_vs_rank0)"
holds "d > 0.01" "... and rank 1 differs from it by its own last update" d="$(results broadcast_ranks_apart | tail -1)"
for d in $(results local_vs_mine); do
  holds "d == 0" "broadcast_buffers=false: each rank holds the statistics of its own rows" d="$d"
done
holds "d > 0.1" "... which differ between the ranks" d="$(result local_ranks_apart)"
for d in $(results sync_ranks_apart); do holds "d == 0" "SyncBatchNorm: the ranks' statistics are the same bits" d="$d"; done
for d in $(results sync_vs_global); do
  holds "d < 1e-5" "... those of one process on the global batch (to float32 rounding)" d="$d"
done
for d in $(results broadcast_vs_global | head -1) $(results local_vs_global | head -1); do
  holds "d > 0.1" "without SyncBatchNorm, rank 0 (which saves the checkpoint) is far from the global batch's" d="$d"
done
