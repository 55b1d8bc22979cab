// The one place stb_image and stb_image_write are compiled (their implementations live in
// the headers, switched on by these defines). Only the formats the engine promises are
// compiled in: every decoder is code that reads untrusted bytes, and fuzzing found the PNM
// header parser overflowing a signed int (fuzz/corpus/image/regression_pnm_*).
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include "stb/stb_image.h"
#include "stb/stb_image_write.h"
