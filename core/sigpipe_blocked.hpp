#pragma once
// SIGPIPE blocked on the calling thread for the guard's lifetime. Debian's cpp-httplib is a
// compiled library that writes with flags 0: a write to a connection its peer closed (a
// scraper that hung up mid-page, a GET cancelled while its request goes out) raises SIGPIPE
// on the writing thread, which ends the process. Blocked, the write fails with EPIPE instead.
// Threads started meanwhile inherit the mask, so an HTTP server's worker pool is covered too.
#include <pthread.h>
#include <signal.h>

#include <ctime>

namespace kvrelay {

class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &sigpipe_, &before_);
  }
  // One raised meanwhile is taken off the thread before the mask is restored, so that it is
  // never delivered.
  ~SigpipeBlocked() {
    if (sigismember(&before_, SIGPIPE)) return;
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      const timespec now{0, 0};
      sigtimedwait(&sigpipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t sigpipe_;
  sigset_t before_;
};

}  // namespace kvrelay
