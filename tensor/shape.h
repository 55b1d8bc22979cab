// Shapes and strides: the arithmetic every view and every broadcasting op relies on.
//
//   Shape s = {2, 3, 4};
//   numel(s);                       // 24
//   contiguous_strides(s);          // {12, 4, 1}: row-major, last dim fastest
//   broadcast_shapes({3, 1}, {4});  // {3, 4}, NumPy's rule
//   shape_str(s);                   // "(2,3,4)"
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engine {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);

// NumPy broadcasting: align trailing dims; each pair must be equal or one of them 1.
// Throws engine::Error naming `op` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");

// True when two different indices of a view name one element: a dim of size > 1 with
// stride 0, as expand() makes. Writing through such a view would keep one value of several.
bool repeats_elements(const Shape& shape, const Strides& strides);

// Maps a possibly negative dim (-1 = last) into [0, ndim); throws naming `op` if out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace engine
