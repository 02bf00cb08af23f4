/* The compiled trip loop's look for a stop before every trip, as an XLA FFI handler on the CPU
 * (sexpgpu_runtime/lowering/trip_look.py builds, loads and registers it; docs/runtime.md "The trip loop").
 *
 * One word per slot (one slot per run's generator): bit 0, a stop was asked for; bits 1.., the last
 * committed step + 1 (the last step whose update is queued, Trainer._commit). The look before a trip of
 * step `step` answers no (0) once the stop bit is set and that step is not committed, and yes (1) else.
 * `trip_look_commit` commits a step unless a stop came first (then the host raises the stop), in one
 * compare-and-swap, so a loop cut short is never trained on. A countdown per slot (tests) sets the stop
 * bit at a given look, as a signal arriving just before that trip would.
 *
 * Only the C API (xla/ffi/api/c_api.h): a C compiler and JAX's headers build it. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "xla/ffi/api/c_api.h"

#define TRIP_LOOK_SLOTS 1024

static _Atomic int64_t words[TRIP_LOOK_SLOTS];
static _Atomic int64_t countdown[TRIP_LOOK_SLOTS];   /* 0: none; n: the stop bit set at the n-th look */

void trip_look_reset(int32_t slot) {
  atomic_store(&words[slot], 0);
  atomic_store(&countdown[slot], 0);
}

void trip_look_stop(int32_t slot) { atomic_fetch_or(&words[slot], 1); }

void trip_look_stop_at(int32_t slot, int64_t look) { atomic_store(&countdown[slot], look); }

/* Commit `step` (0-based) unless a stop came first: 0 committed, 1 stopped. */
int32_t trip_look_commit(int32_t slot, int64_t step) {
  int64_t w = atomic_load(&words[slot]);
  for (;;) {
    if (w & 1) return 1;
    if (atomic_compare_exchange_weak(&words[slot], &w, (step + 1) << 1)) return 0;
  }
}

static int64_t scalar_i64(void* arg) {
  XLA_FFI_Buffer* b = (XLA_FFI_Buffer*)arg;
  return b->dtype == XLA_FFI_DataType_S32 ? *(int32_t*)b->data : *(int64_t*)b->data;
}

/* args: slot (s32 scalar), step (s64 scalar), trip (s64 scalar, so no two looks are one), trips (s64
 * scalar: a look at trip >= trips, after the loop's last trip, answers yes and counts for nothing);
 * result: whether the trip runs (pred scalar). */
XLA_FFI_Error* trip_look(XLA_FFI_CallFrame* frame) {
  XLA_FFI_Extension_Base* ext = frame->extension_start;
  if (ext != NULL && ext->type == XLA_FFI_Extension_Metadata) {
    XLA_FFI_Metadata* m = ((XLA_FFI_Metadata_Extension*)ext)->metadata;
    m->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    m->api_version.extension_start = NULL;
    m->api_version.major_version = XLA_FFI_API_MAJOR;
    m->api_version.minor_version = XLA_FFI_API_MINOR;
    m->traits = 0;
    return NULL;
  }
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  int32_t slot = (int32_t)scalar_i64(frame->args.args[0]);
  int64_t step = scalar_i64(frame->args.args[1]);
  uint8_t* go = (uint8_t*)((XLA_FFI_Buffer*)frame->rets.rets[0])->data;
  if (scalar_i64(frame->args.args[2]) >= scalar_i64(frame->args.args[3])) {
    *go = 1;
    return NULL;
  }
  if (atomic_load(&countdown[slot]) > 0 && atomic_fetch_sub(&countdown[slot], 1) == 1) trip_look_stop(slot);
  int64_t w = atomic_load(&words[slot]);
  int stop = (w & 1) && (w >> 1) < step + 1;
  *go = stop ? 0 : 1;
  return NULL;
}
