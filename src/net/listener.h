// Listening sockets: one SO_REUSEPORT socket per loop thread on the same address, so the kernel
// spreads new connections over the threads with no shared accept queue.
#pragma once

#include <cstdint>
#include <string>

namespace deferq::net {

// Returns the listening fd, or -1 with *error set ("cannot listen on 127.0.0.1:6380: ...").
int OpenListener(const std::string& host, uint16_t port, std::string* error);

// One listening socket that no other socket may share (no SO_REUSEPORT): the metrics endpoint,
// served by a single loop. -1 with *error as OpenListener.
int OpenExclusiveListener(const std::string& host, uint16_t port, std::string* error);

// Fails (false, *error) when another process already listens on the address. The loops' own
// listeners share the port through SO_REUSEPORT, which would otherwise silently split the traffic
// with a second deferq (or anything else using SO_REUSEPORT) started on the same port.
bool CheckPortFree(const std::string& host, uint16_t port, std::string* error);

// CheckPortFree, retried while the address is in use, for at most `wait_ms`. A process killed
// with SIGKILL can leave its listener behind for a moment (its io_uring holds the socket until
// the kernel has torn the ring down), so a supervisor's immediate restart waits for the port
// instead of failing. It waits rather than binding beside the stale socket: with SO_REUSEPORT
// that socket would take a share of the new connections and never accept them.
bool WaitForPortFree(const std::string& host, uint16_t port, int64_t wait_ms, std::string* error);

// "ip:port" of a connected socket's peer (peer=true) or local end.
std::string SocketAddress(int fd, bool peer);

}  // namespace deferq::net
