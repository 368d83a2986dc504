// client_link.h — what a request's lifecycle needs to know of the client that sent it:
// whether it went away. The HTTP side implements it (ConnectionWatch); the lifecycle never
// sees a socket or an HTTP type, so a unit test can drive a whole turn with its own link.
#pragma once

namespace spark {

class ClientLink {
 public:
  virtual ~ClientLink() = default;
  // True once the client closed its side; cheap enough to ask on every poll.
  virtual bool closed() const = 0;
};

}  // namespace spark
