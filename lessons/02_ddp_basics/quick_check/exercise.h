// Lesson 2's quick check: how does DDP keep the copies in sync? Write its core by hand.
//
//   average_gradients(model->parameters(), group);   // after loss.backward(), before step()
//
// (The vector is taken by value: a Variable is a handle, so the copies share the model's
// gradients.) After the call, every parameter's .grad on every rank holds the mean over the ranks of
// that parameter's .grad, so that every replica takes the same optimizer step.
#pragma once

#include <vector>

#include "autograd/variable.h"
#include "dist/process_group.h"

namespace lesson2 {

void average_gradients(std::vector<engine::autograd::Variable> params, engine::dist::ProcessGroup& group);

}  // namespace lesson2
