# Offline stand-in for rules_cc: Bazel 4.2.3's native C++ rules, re-exported.
cc_binary = native.cc_binary
cc_library = native.cc_library
cc_test = native.cc_test
cc_import = native.cc_import
cc_proto_library = native.cc_proto_library
objc_library = native.objc_library
objc_import = native.objc_import
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
fdo_profile = native.fdo_profile
fdo_prefetch_hints = native.fdo_prefetch_hints
