// The hints are inline functions in the header; SwiftPM wants a source file for the target.
#include "CMemoryHints.h"
