#pragma once
// Colocated placement: every model is on every rank, and only the models of the phase at hand
// need the device. With placement.park (the memory plan's decision), the others' parameter and
// gradient shards wait in host memory (ShardedModel::park) until their phase comes.
#include <initializer_list>

#include "quartet/engine/role_models.hpp"

namespace quartet {

class ModelParking {
 public:
  // enabled: colocated placement whose memory plan parks the idle models.
  ModelParking(const RoleModels& models, bool enabled) : models_(models), enabled_(enabled) {}
  // `roles` on the device, every other model of this rank in host memory.
  void keep_only(std::initializer_list<Role> roles);

 private:
  const RoleModels& models_;
  bool enabled_;
};

}  // namespace quartet
