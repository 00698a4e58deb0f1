#ifndef ZONEFEED_CLIBPQ_SHIM_H
#define ZONEFEED_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
