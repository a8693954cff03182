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

// "ip:port" of a connected socket's peer (peer=true) or local end.
std::string SocketAddress(int fd, bool peer);

}  // namespace deferq::net
