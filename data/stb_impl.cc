// The one place stb_image and stb_image_write are compiled (their implementations live in
// the headers, switched on by these defines).
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include "stb/stb_image.h"
#include "stb/stb_image_write.h"
