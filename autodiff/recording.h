#pragma once
// Library-internal RAII guards over this thread's recording state.
#include <memory>

#include "tenax/core/ops/dispatch.h"

namespace tenax::detail {

class TapeImpl;

/// Makes `tape` the recorder of this thread for the guard's lifetime.
class RecordingScope {
 public:
  explicit RecordingScope(TapeImpl* tape);
  ~RecordingScope();
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  RecordState previous_;
};

/// Stops recording for the guard's lifetime (sweeps run ops without recording them).
class PauseRecording {
 public:
  PauseRecording();
  ~PauseRecording();
  PauseRecording(const PauseRecording&) = delete;
  PauseRecording& operator=(const PauseRecording&) = delete;

 private:
  RecordState previous_;
};

/// Makes `previous` (a state a guard saved) this thread's recording state again. A public Tape
/// destroyed while a guard held it as the state to restore (from inside a function the library was
/// calling) was kept alive for this moment: the state becomes the one that tape had replaced, and
/// the tape is freed.
void restore_record_state(const RecordState& previous);

/// A fresh recording-session serial (never 0), unique in the process.
uint32_t new_serial();

/// A tape with a fresh serial.
std::unique_ptr<TapeImpl> new_tape();

}  // namespace tenax::detail
