#ifndef ZONEFEED_MEMORY_HINTS_H
#define ZONEFEED_MEMORY_HINTS_H

/// Asks the processor to bring the cache line at `address` in, without waiting for it.
static inline void zonefeed_prefetch(const void *address) { __builtin_prefetch(address, 0, 3); }

#endif
