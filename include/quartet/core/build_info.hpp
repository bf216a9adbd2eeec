#pragma once
// What the build came from. The commit lives in one generated source file (build_info.cpp in
// the build tree), not in a compile definition: a new commit then recompiles that file alone,
// not every file and the precompiled LibTorch header.

namespace quartet {

// `git rev-parse --short=12 HEAD` as of the last CMake configure ("unknown" outside a clone).
const char* git_commit();

}  // namespace quartet
