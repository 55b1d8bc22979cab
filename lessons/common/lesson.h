// Small helpers every lesson program uses.
//
//   std::string dir = output_dir("02_ddp_basics");   // where to write traces and pictures
//   std::printf("parameters %s\n", fingerprint(model).c_str());   // equal text = equal bits
//   report("fingerprint", fingerprint(model));   // what the step's test asserts on
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "nn/module.h"

namespace lessons {

// $LESSON_OUT if set (tests set it), else <workspace>/out/<name> under `bazel run`, else
// ./out/<name>; created if missing.
std::string output_dir(const std::string& name);

// Records a number or text the step claims, for its test: one JSON line {"rank", "key",
// "value"} appended to the file $LESSON_RESULTS (the step's test sets it; nothing is
// written without it). The printed lines are for the learner; check.sh reads these
// (`result KEY`, `results KEY`), so rewording a message cannot break a test.
void report(const std::string& key, double value);
void report(const std::string& key, const std::string& value);

// A 64-bit hash (FNV-1a) of every parameter's bytes, in order, as 16 hex digits: two
// replicas print the same fingerprint exactly when their parameters are bit-identical.
std::string fingerprint(engine::nn::Module& model);

// The toy task several lessons train on: the MLP 784-256-256-10 (the same weights for the
// same seed on every rank) and, for step s, a batch whose class is which of ten slices of
// x has the largest sum (learnable, and made on any rank without a dataset).
std::shared_ptr<engine::nn::Sequential> toy_mlp(uint64_t seed);
void toy_batch(int step, int64_t batch, uint64_t seed, engine::Tensor* x, engine::Tensor* y);

// "3 7 9": the numbers, separated by spaces.
std::string join(const std::vector<int64_t>& values);
// The same for doubles, each with every digit (%.17g): a row of numbers for report().
std::string numbers(const std::vector<double>& values);

// The largest |a - b| over two tensors of the same shape.
double max_abs_diff(const engine::Tensor& a, const engine::Tensor& b);

// How far one model is from another: the largest |a - b| over their parameters (with
// grads, over their gradients), and that divided by the largest |b| of the same kind.
double max_difference(engine::nn::Module& a, engine::nn::Module& b, bool grads = false);
double relative_difference(engine::nn::Module& a, engine::nn::Module& b, bool grads = false);

}  // namespace lessons
