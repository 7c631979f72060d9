#include "runtime/engine/default_engine.h"

namespace kiln {

Engine& default_engine() {
  // Never destroyed: functions may still run from static destructors of other objects.
  static Engine* engine = make_engine().release();
  return *engine;
}

}  // namespace kiln
