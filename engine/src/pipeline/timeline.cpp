// timeline_kind_name (lattice/train.h): the names the run store and the Studio use.
#include <cassert>

#include "pipeline/timeline.h"

namespace lattice {

const char* timeline_kind_name(TimelineBox::Kind kind) {
  static const char* const names[TimelineBox::kKinds] = {"forward", "backward",  "pipeline wait",
                                                         "dp comm", "optimizer", "embedding comm"};
  assert(kind >= 0 && kind < TimelineBox::kKinds);
  return names[kind];
}

}  // namespace lattice
