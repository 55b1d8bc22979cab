#include "tensor/cuda/shared_library.h"

#include <dlfcn.h>
#include <link.h>

#include "tensor/check.h"

namespace engine::cuda {

SharedLibrary::SharedLibrary(std::string soname, std::string purpose)
    : soname_(std::move(soname)), purpose_(std::move(purpose)) {
  handle_ = dlopen(soname_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* why = dlerror();
    throw Error("[cuda] cannot load " + soname_ + " (" + purpose_ + "): " + (why ? why : "unknown reason") +
                ". Install it, or add the folder that holds it to LD_LIBRARY_PATH");
  }
}

void* SharedLibrary::address(const char* symbol) const {
  dlerror();
  void* p = dlsym(handle_, symbol);
  ENGINE_REQUIRE(p != nullptr, "[cuda] ", path(), " has no function ", symbol, " (", purpose_,
                 "): the installed version is not the one this engine was built against");
  return p;
}

std::string SharedLibrary::path() const {
  const link_map* map = nullptr;
  if (dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
  return soname_;
}

}  // namespace engine::cuda
