#pragma once
// JSON over HTTP POST to one URL, through libcurl: the transport of rewards served over HTTP
// (rl/rewards/reward_endpoint.hpp). One connection is kept alive between requests. Only http:// and
// https:// URLs; libcurl's usual environment (http_proxy, no_proxy, CA bundle) applies as for
// curl itself. No signals are used (CURLOPT_NOSIGNAL): the process may have many threads.
#include <memory>
#include <string>

#include "quartet/core/check.hpp"

namespace quartet {

// A request that did not get a response: libcurl's error, and whether it was about the
// connection (refused, reset, closed without a response: worth another attempt) or not
// (a timeout, a TLS certificate, a malformed URL).
class HttpTransportError : public Error {
 public:
  HttpTransportError(const std::string& what, bool connection) : Error(what), connection_(connection) {}
  bool connection() const { return connection_; }

 private:
  bool connection_;
};

struct HttpResponse {
  long status = 0;   // 200, 500, ...
  std::string body;
  bool too_large = false;  // the body passed max_body_bytes: the transfer was cut there
};

class HttpClient {
 public:
  // Refuses (quartet::Error) a URL that libcurl cannot parse or whose scheme is not http(s).
  explicit HttpClient(const std::string& url);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // POSTs `json` (Content-Type: application/json) and returns the response, whatever its
  // status; connecting and the whole exchange must fit in timeout_seconds. A failure to get a
  // response is an HttpTransportError.
  // A body longer than max_body_bytes is cut off there (too_large), not read to its end.
  HttpResponse post_json(const std::string& json, double timeout_seconds, std::size_t max_body_bytes);
  // Opens a connection (and, for https, the TLS session) and closes it without a request:
  // whether a server listens there. HttpTransportError when not.
  void probe(double timeout_seconds);

  const std::string& url() const { return url_; }

 private:
  struct Handle;
  std::string url_;
  std::unique_ptr<Handle> handle_;
};

}  // namespace quartet
