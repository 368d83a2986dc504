// sd_notify.h — the systemd notification protocol (READY=1, WATCHDOG=1, STOPPING=1, STATUS=)
// over the Unix datagram socket named by $NOTIFY_SOCKET; a no-op when it is unset.
#pragma once
#include <chrono>
#include <string>

namespace spark {

// Sends one state string; returns false when there is no socket or the send failed.
bool sd_notify(const std::string& state);
// The watchdog interval systemd asked for ($WATCHDOG_USEC, for this pid), or 0 if none.
std::chrono::microseconds sd_watchdog_interval();

}  // namespace spark
