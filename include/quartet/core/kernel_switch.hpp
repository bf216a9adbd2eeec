#pragma once
// The on/off switch of one family of quartet's device kernels (decode, rotary, SwiGLU, AdamW):
// on where CMake compiled the family in, unless the environment sets its variable to 0
// (e.g. QUARTET_ROTARY_KERNEL=0); switching on a family the build lacks is refused.

namespace quartet {

class KernelSwitch {
 public:
  // setter: the public function that calls set(), for the refusal's message.
  KernelSwitch(bool compiled_in, const char* variable, const char* setter);
  bool on() const { return on_; }
  void set(bool on);

 private:
  bool compiled_in_;
  const char* setter_;
  bool on_;
};

}  // namespace quartet
