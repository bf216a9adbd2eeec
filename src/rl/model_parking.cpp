#include "quartet/rl/model_parking.hpp"

#include <algorithm>

namespace quartet {

void ModelParking::keep_only(std::initializer_list<Role> roles) {
  if (!enabled_) return;
  for (Role r : kAllRoles) {
    RoleModel* m = models_.get(r);
    if (!m) continue;
    if (std::find(roles.begin(), roles.end(), r) != roles.end()) m->model->unpark();
    else m->model->park();
  }
}

}  // namespace quartet
