#include "dist/powersgd.h"

#include <cmath>
#include <memory>

#include "tensor/ops.h"

namespace engine::dist {
namespace {

// A gradient as the matrix PowerSGD compresses: first dim by the rest (a view).
Tensor as_matrix(const Tensor& g) { return g.dim() == 0 ? g.reshape({1, 1}) : g.reshape({g.size(0), -1}); }

struct Plan {
  std::vector<Tensor> matrices;      // views into the bucket, compressed
  std::vector<int64_t> ranks;        // r per matrix (at most min(n, m))
  std::vector<Tensor> uncompressed;  // views into the bucket, sent as they are
};

Plan plan_bucket(PowerSGDState& s, const GradBucket& b) {
  Plan plan;
  for (const Tensor& g : b.gradients) {
    const Tensor m = as_matrix(g);
    const int64_t n = m.size(0), k = m.size(1);
    const int64_t r = std::min<int64_t>({n, k, s.matrix_approximation_rank});
    const bool worth = double((n + k) * r) * s.min_compression_rate < double(n * k);
    s.numel_before_compression += n * k;
    s.numel_after_compression += worth ? (n + k) * r : n * k;
    if (worth)
      plan.matrices.push_back(m), plan.ranks.push_back(r);
    else
      plan.uncompressed.push_back(g);
  }
  return plan;
}

// One flat buffer and a view of it per shape: several matrices travel in one all-reduce.
std::vector<Tensor> views_of(const Tensor& flat, const std::vector<Shape>& shapes) {
  std::vector<Tensor> out;
  int64_t at = 0;
  for (const Shape& s : shapes) {
    const int64_t n = numel(s);
    out.push_back(flat.narrow(0, at, n).view(s));
    at += n;
  }
  return out;
}

Tensor flat_of(const std::vector<Shape>& shapes) {
  int64_t n = 0;
  for (const Shape& s : shapes) n += numel(s);
  return zeros({n});
}

// Steps are counted at each step's last bucket (as PyTorch's maybe_increase_iter).
void count_step(PowerSGDState& s, bool last_bucket) {
  if (last_bucket) ++s.iter;
}

// Settings that would make every gradient zero or NaN are refused by name, at the first
// bucket (the state is a plain struct, filled in by the caller).
void check_settings(const PowerSGDState& s) {
  ENGINE_REQUIRE(s.matrix_approximation_rank >= 1, "[PowerSGD] matrix_approximation_rank must be at least 1, got ",
                 s.matrix_approximation_rank, " (rank 0 would send nothing, and every compressed gradient would be 0)");
  ENGINE_REQUIRE(std::isfinite(s.min_compression_rate) && s.min_compression_rate >= 0,
                 "[PowerSGD] min_compression_rate must be a finite number >= 0, got ", s.min_compression_rate);
  ENGINE_REQUIRE(std::isfinite(s.orthogonalization_epsilon) && s.orthogonalization_epsilon >= 0,
                 "[PowerSGD] orthogonalization_epsilon must be a finite number >= 0, got ",
                 s.orthogonalization_epsilon);
}

// The residuals are this rank's own: a state is used by the rank that filled it, at the
// world size it was filled at (a checkpoint loaded on another rank would add that rank's
// residuals to this one's gradient, silently).
void check_owner(PowerSGDState& s, const ProcessGroup& group) {
  if (s.rank < 0) {
    s.rank = group.rank();
    s.world_size = group.size();
  }
  ENGINE_REQUIRE(s.rank == group.rank() && s.world_size == group.size(),
                 "[PowerSGD] this state holds the residuals of ", "rank ", s.rank, " of ", s.world_size,
                 " but is used by rank ", group.rank(), " of ", group.size(),
                 ": each rank saves its own PowerSGD state and loads it again, at the same world size");
}

// Whether some column of q (m x r) is all zeros: a warm-start Q that came from a gradient
// that was 0 (Q = M^T P = 0). Kept, it would give P = M Q = 0 in every later step, and
// that matrix would never be sent again; such a Q is drawn afresh instead.
bool has_zero_column(const Tensor& q) {
  const int64_t n = q.size(0), r = q.size(1);
  const float* a = q.data<float>();
  for (int64_t i = 0; i < r; ++i) {
    bool zero = true;
    for (int64_t k = 0; k < n && zero; ++k) zero = a[k * r + i] == 0;
    if (zero) return true;
  }
  return false;
}

Tensor random_q(PowerSGDState& s, int64_t m, int64_t r) {
  Tensor q = randn({m, r}, &s.rng);
  orthogonalize(q, s.orthogonalization_epsilon);
  return q;
}

}  // namespace

void orthogonalize(Tensor& p, double epsilon) {
  ENGINE_REQUIRE(p.dim() == 2 && p.is_contiguous() && p.dtype() == DType::Float32,
                 "[orthogonalize] needs a contiguous float32 matrix, got ", shape_str(p.shape()));
  const int64_t n = p.size(0), r = p.size(1);
  float* a = p.data<float>();
  for (int64_t i = 0; i < r; ++i) {
    double norm = 0;
    for (int64_t k = 0; k < n; ++k) norm += double(a[k * r + i]) * a[k * r + i];
    // A zero column (the gradient was 0) stays 0: its share of P Q^T is then 0, which is
    // that gradient exactly. Divided by its norm it would be 0 / 0 = NaN in every element,
    // as in PyTorch with its default epsilon of 0.
    if (norm == 0) continue;
    const double inv = 1.0 / (std::sqrt(norm) + epsilon);
    for (int64_t k = 0; k < n; ++k) a[k * r + i] = float(a[k * r + i] * inv);
    for (int64_t j = i + 1; j < r; ++j) {  // remove column i from the later columns
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += double(a[k * r + i]) * a[k * r + j];
      for (int64_t k = 0; k < n; ++k) a[k * r + j] = float(a[k * r + j] - dot * a[k * r + i]);
    }
  }
}

Future powerSGD_hook(PowerSGDState& s, GradBucket& b) {
  check_settings(s);
  ProcessGroup& group = s.group ? *s.group : *b.group;
  check_owner(s, group);
  const double world = double(group.size());
  if (s.iter < s.start_powerSGD_iter) {  // plain all-reduce while training settles, on the state's group
    count_step(s, b.is_last);
    GradBucket plain = b;
    plain.group = &group;
    return hooks::allreduce_hook(plain);
  }
  Tensor input = b.buffer;
  if (s.use_error_feedback) {
    auto it = s.error.find(b.index);
    if (it != s.error.end()) {
      ENGINE_REQUIRE(it->second.numel() == input.numel(), "[PowerSGD] bucket ", b.index, "'s residual holds ",
                     it->second.numel(), " values but the bucket ", input.numel(),
                     ": the state was loaded from a run with another model or bucket size");
      add_(input, it->second);
    }
  }
  const Tensor before = s.use_error_feedback ? input.clone() : Tensor();
  Plan plan = plan_bucket(s, b);

  // Q per matrix: drawn once (or every step without warm start), the same on every rank
  // because every rank draws from the same generator in the same order (and a kept Q,
  // averaged over the ranks, is the same everywhere, so is redrawn everywhere or nowhere).
  std::vector<Tensor>& qs = s.qs[b.index];
  if (!s.warm_start || qs.size() != plan.matrices.size()) {
    qs.clear();
    for (size_t i = 0; i < plan.matrices.size(); ++i)
      qs.push_back(random_q(s, plan.matrices[i].size(1), plan.ranks[i]));
  }
  for (size_t i = 0; i < qs.size(); ++i) {
    const Shape want{plan.matrices[i].size(1), plan.ranks[i]};
    ENGINE_REQUIRE(qs[i].shape() == want, "[PowerSGD] bucket ", b.index, "'s Q ", i, " is ", shape_str(qs[i].shape()),
                   " but its gradient needs ", shape_str(want),
                   ": the state was loaded from a run with another model or bucket size");
    if (has_zero_column(qs[i])) qs[i] = random_q(s, plan.matrices[i].size(1), plan.ranks[i]);
  }
  std::vector<Shape> p_shapes, q_shapes, u_shapes;
  for (size_t i = 0; i < plan.matrices.size(); ++i) {
    p_shapes.push_back({plan.matrices[i].size(0), plan.ranks[i]});
    q_shapes.push_back(qs[i].shape());
  }
  for (const Tensor& u : plan.uncompressed) u_shapes.push_back(u.shape());

  // 1. The uncompressed tensors, summed as they are.
  Tensor u_flat = flat_of(u_shapes);
  const std::vector<Tensor> u_views = views_of(u_flat, u_shapes);
  for (size_t i = 0; i < u_views.size(); ++i) Tensor(u_views[i]).copy_(plan.uncompressed[i]);
  Work u_work = group.all_reduce(u_flat, ReduceOp::Sum);

  // 2. P = M Q for every matrix, summed over the ranks in one message.
  Tensor p_flat = flat_of(p_shapes);
  std::vector<Tensor> ps = views_of(p_flat, p_shapes);
  for (size_t i = 0; i < ps.size(); ++i) matmul(plan.matrices[i], qs[i], ps[i]);

  // A step whose gradients hold inf or NaN on some rank (float16 overflowing under a
  // GradScaler) makes a sum below (of the uncompressed tensors, of P, or of Q) not finite,
  // the same on every rank. From there on every rank skips this step's compression alike:
  // its compressed gradients are NaN, so that the scaler skips the step as it would
  // without the hook, and the state (residual, warm-start Q) is left as it was. Kept, a
  // NaN residual or Q would make every later step NaN, and the scaler skip them all.
  auto not_finite = std::make_shared<bool>(false);
  return Future(u_work, u_flat)
      .then([&group, plan, u_shapes, p_flat, world, not_finite](Tensor u_sum) {
        std::vector<Tensor> us = views_of(u_sum, u_shapes);
        for (size_t i = 0; i < us.size(); ++i) Tensor(plan.uncompressed[i]).copy_(us[i] / world);
        *not_finite = !all_finite(u_sum);
        if (*not_finite) return p_flat;
        group.all_reduce(p_flat, ReduceOp::Sum).wait();
        *not_finite = !all_finite(p_flat);
        return p_flat;
      })
      .then([&group, &s, plan, ps, &qs, q_shapes, world, not_finite](Tensor p_sum) {
        if (*not_finite) return p_sum;  // every rank skips the Q all-reduce alike
        // 3. Orthonormal P, then Q = M^T P on each rank, averaged over the ranks.
        for (Tensor p : ps) orthogonalize(p, s.orthogonalization_epsilon);
        Tensor q_flat = flat_of(q_shapes);
        std::vector<Tensor> q_views = views_of(q_flat, q_shapes);
        for (size_t i = 0; i < ps.size(); ++i) matmul(plan.matrices[i].transpose(0, 1), ps[i], q_views[i]);
        group.all_reduce(q_flat, ReduceOp::Sum).wait();
        mul_(q_flat, 1.0 / world);
        *not_finite = !all_finite(q_flat);
        if (!*not_finite)
          for (size_t i = 0; i < qs.size(); ++i) qs[i] = q_views[i].clone();  // the next step's warm start
        return q_flat;
      })
      .then([&s, plan, ps, &qs, input, before, index = b.index, last = b.is_last, not_finite](Tensor) {
        count_step(s, last);
        if (*not_finite) {
          for (const Tensor& m : plan.matrices) Tensor(m).fill_(std::nan(""));
          return input;
        }
        // 4. M ~ P Q^T, written over the gradient in the bucket; the residual is kept.
        for (size_t i = 0; i < ps.size(); ++i) matmul(ps[i], qs[i].transpose(0, 1), plan.matrices[i]);
        if (s.use_error_feedback) s.error[index] = before - input;
        return input;
      });
}

}  // namespace engine::dist
