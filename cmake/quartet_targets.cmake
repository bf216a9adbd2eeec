# How quartet's targets are compiled: the libraries of the areas (src/<area>/, subfolders
# included), and every executable (the dispatcher, the tests, the benchmarks).
#
# Compile time on a small machine is dominated by LibTorch's headers: parsing them costs about
# 10 s a translation unit, loading them from a precompiled header about 3 s, and a file that
# needs no tensor at all compiles in 1-2 s without them. So:
#   - a source file that includes no LibTorch header, itself or through quartet's headers
#     (quartet_uses_torch, decided when CMake configures), compiles alone and without the
#     precompiled header;
#   - the others share one precompiled header (LibTorch's tensor types and torch::nn::Module,
#     built once by quartet_core) and are compiled in unity batches of a few files, so that
#     the header is loaded and LibTorch's inline functions are compiled once a batch;
#   - the libraries are shared, and an executable is not relinked when a library it uses
#     changes (LINK_DEPENDS_NO_SHARED): touching one source rebuilds its batch and its library.
# Every target compiles position-independent code (-fPIC), so that one precompiled header fits
# them all.

option(QUARTET_PCH "Precompile LibTorch's headers once for every target" ON)
option(QUARTET_UNITY "Compile the files that use LibTorch in unity batches" ON)
set(QUARTET_UNITY_BATCH 6 CACHE STRING "Source files per unity batch")

set(QUARTET_WARNINGS -Wall -Wextra)
if(QUARTET_WERROR)
  list(APPEND QUARTET_WARNINGS -Werror)
endif()

# quartet_uses_torch(FILE OUT): ON when FILE includes a LibTorch header (torch/, ATen/, c10/),
# itself or through the quartet headers (or the headers beside it) that it includes. The answer
# only picks how the file is compiled: one that is wrong is slower to build, never wrong.
function(quartet_uses_torch file out)
  get_property(known GLOBAL PROPERTY "quartet_torch:${file}" SET)
  if(known)
    get_property(answer GLOBAL PROPERTY "quartet_torch:${file}")
    set(${out} ${answer} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY "quartet_torch:${file}" OFF)  # an include cycle reads as no
  get_filename_component(dir "${file}" DIRECTORY)
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  set(answer OFF)
  foreach(line IN LISTS includes)
    if(line MATCHES "[<\"](torch|ATen|c10)/")
      set(answer ON)
    elseif(line MATCHES "\"([^\"]+)\"")
      set(header "")
      if(EXISTS "${PROJECT_SOURCE_DIR}/include/${CMAKE_MATCH_1}")
        set(header "${PROJECT_SOURCE_DIR}/include/${CMAKE_MATCH_1}")
      elseif(EXISTS "${dir}/${CMAKE_MATCH_1}")
        set(header "${dir}/${CMAKE_MATCH_1}")
      endif()
      if(header)
        quartet_uses_torch("${header}" answer)
      endif()
    endif()
    if(answer)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY "quartet_torch:${file}" ${answer})
  set(${out} ${answer} PARENT_SCOPE)
endfunction()

# quartet_compile(TARGET): warnings, -fPIC, and the split above for the target's C++ sources.
function(quartet_compile target)
  target_compile_options(${target} PRIVATE ${QUARTET_WARNINGS})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    target_compile_options(${target} PRIVATE -fPIC)  # not CMake's -fPIE: the header is built with -fPIC
  endif()
  if(QUARTET_PCH AND NOT target STREQUAL "quartet_core")
    target_precompile_headers(${target} REUSE_FROM quartet_core)
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ${QUARTET_UNITY} UNITY_BUILD_BATCH_SIZE ${QUARTET_UNITY_BATCH})
  get_target_property(sources ${target} SOURCES)
  foreach(source IN LISTS sources)
    if(NOT source MATCHES "\\.cpp$")
      continue()
    endif()
    get_filename_component(path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    quartet_uses_torch("${path}" torch)
    if(NOT torch)
      set_source_files_properties(${source} TARGET_DIRECTORY ${target} PROPERTIES
                                  SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endfunction()

# quartet_area(AREA [DEPENDS AREA...]): the library quartet_AREA of src/AREA/**/*.cpp. It sees
# its own headers (include/quartet/AREA, linked into a directory of its own in the build tree)
# and those of the areas it depends on, directly or not, and nothing else: an include of an
# area above is a "No such file" error at build time.
function(quartet_area area)
  cmake_parse_arguments(A "" "" "DEPENDS;SOURCES" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${area}/*.cpp)
  add_library(quartet_${area} SHARED ${sources} ${A_SOURCES})
  # No quartet_<area>_EXPORTS definition: the precompiled header must see the same macros in
  # every target, or GCC ignores it.
  set_target_properties(quartet_${area} PROPERTIES DEFINE_SYMBOL "")
  set(headers ${PROJECT_BINARY_DIR}/layers/${area})
  file(MAKE_DIRECTORY ${headers}/quartet)
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/quartet/${area} ${headers}/quartet/${area} SYMBOLIC)
  target_include_directories(quartet_${area} PUBLIC ${headers})
  foreach(below IN LISTS A_DEPENDS)
    target_link_libraries(quartet_${area} PUBLIC quartet_${below})
  endforeach()
  quartet_compile(quartet_${area})
endfunction()

# quartet_executable(NAME SOURCES...): an executable of quartet's (linked to every area).
function(quartet_executable name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE quartet_lib)
  set_target_properties(${name} PROPERTIES LINK_DEPENDS_NO_SHARED ON)
  quartet_compile(${name})
endfunction()
