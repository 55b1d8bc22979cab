# Step 2's claims: the mean of the halves' gradients is the whole batch's gradient, up to
# float rounding (bound: 1e-6 of the largest gradient, i.e. a few float32 ulps); 20 steps
# trained that way end where the baseline ends (bound: 1e-5 relative).
d=$(result gradient_difference)
s=$(result largest_gradient)
holds "d <= 1e-6 * s" "the halves' mean is the whole batch's gradient" d="$d" s="$s"
r=$(result relative_difference)
holds "r < 1e-5" "the split run ends at the baseline" r="$r"
