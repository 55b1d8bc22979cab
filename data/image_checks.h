// Internal to data/image.cc: what stb_image does not check in a file before it decodes it,
// checked here first. Not part of the public API.
//
//   check_jpeg_huffman_tables(bytes, path);     // before stb reads the header (its info too)
//   check_bmp_holds_its_pixels(bytes, path);    // after the dimensions are bounded
//
// Each returns quietly for a file of another format, and throws engine::Error naming the
// file and what is wrong with it otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engine::data {

// stb (the copy Debian ships, 2022) builds each Huffman table of a JPEG into arrays of 257
// code sizes and 256 symbols without checking that the 16 code counts a table declares add
// up to at most 256: a crafted file writes past both, on the heap (found by fuzzing, under
// UBSan). Every table stb would read is checked, wherever its segment lies in the file.
void check_jpeg_huffman_tables(const std::vector<uint8_t>& bytes, const std::string& path);

// stb decodes a BMP cut short (a copy or download that did not finish) with the missing
// rows black, where its PNG and JPEG decoders fail: an uncompressed BMP must hold the rows
// its header declares.
void check_bmp_holds_its_pixels(const std::vector<uint8_t>& bytes, const std::string& path);

}  // namespace engine::data
