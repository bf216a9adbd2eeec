#include "quartet/core/http_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>

namespace quartet {

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) fail(__FILE__, __LINE__, std::string("curl_global_init: ") + curl_easy_strerror(rc));
  });
}

long milliseconds(double seconds) { return std::max(1L, static_cast<long>(seconds * 1000.0)); }

// Errors of the connection itself, which another attempt may not meet: nothing listening yet,
// a connection reset or closed before (or while) the response came.
bool is_connection_error(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
      return true;
    default:
      return false;
  }
}

struct BodySink {
  HttpResponse* response;
  std::size_t max_bytes;
};

// Returning less than it was given makes libcurl end the transfer (CURLE_WRITE_ERROR).
size_t append_body(char* data, size_t size, size_t count, void* out) {
  auto* sink = static_cast<BodySink*>(out);
  if (sink->response->body.size() + size * count > sink->max_bytes) {
    sink->response->too_large = true;
    return 0;
  }
  sink->response->body.append(data, size * count);
  return size * count;
}

// The settings every request of a handle shares.
void set_common(CURL* curl, const std::string& url, char* error_buffer, double timeout_seconds) {
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, milliseconds(timeout_seconds));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, milliseconds(timeout_seconds));
  error_buffer[0] = '\0';
}

// `doing`: "POST URL", "connecting to URL".
[[noreturn]] void transport_failed(const std::string& doing, CURLcode rc, const char* error_buffer) {
  std::string what = curl_easy_strerror(rc);
  if (error_buffer[0]) what += std::string(" (") + error_buffer + ")";
  throw HttpTransportError(doing + ": " + what, is_connection_error(rc));
}

}  // namespace

struct HttpClient::Handle {
  CURL* curl = nullptr;
  curl_slist* headers = nullptr;
  char error[CURL_ERROR_SIZE] = {0};
  ~Handle() {
    if (headers) curl_slist_free_all(headers);
    if (curl) curl_easy_cleanup(curl);
  }
};

HttpClient::HttpClient(const std::string& url) : url_(url), handle_(std::make_unique<Handle>()) {
  global_init();
  CURLU* parsed = curl_url();
  const CURLUcode urc = curl_url_set(parsed, CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME);
  char* scheme = nullptr;
  if (urc == CURLUE_OK) curl_url_get(parsed, CURLUPART_SCHEME, &scheme, 0);
  const std::string scheme_text = scheme ? scheme : "";
  curl_free(scheme);
  curl_url_cleanup(parsed);
  if (urc != CURLUE_OK)
    fail(__FILE__, __LINE__, "'" + url + "' is not a URL: " + curl_url_strerror(urc));
  if (scheme_text != "http" && scheme_text != "https")
    fail(__FILE__, __LINE__, "'" + url + "' is not an http:// or https:// URL");
  handle_->curl = curl_easy_init();
  QUARTET_CHECK(handle_->curl, "curl_easy_init failed");
  handle_->headers = curl_slist_append(handle_->headers, "Content-Type: application/json");
  handle_->headers = curl_slist_append(handle_->headers, "Accept: application/json");
  // No "Expect: 100-continue" on large bodies: a server that does not answer it (Python's
  // http.server in HTTP/1.0 mode) would cost a second per request.
  handle_->headers = curl_slist_append(handle_->headers, "Expect:");
  QUARTET_CHECK(handle_->headers, "curl_slist_append failed");
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::post_json(const std::string& json, double timeout_seconds, std::size_t max_body_bytes) {
  CURL* curl = handle_->curl;
  HttpResponse response;
  BodySink sink{&response, max_body_bytes};
  set_common(curl, url_, handle_->error, timeout_seconds);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, handle_->headers);
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(json.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "quartet/" QUARTET_VERSION);
  const CURLcode rc = curl_easy_perform(curl);
  if (response.too_large) return response;
  if (rc != CURLE_OK) transport_failed("POST " + url_, rc, handle_->error);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

void HttpClient::probe(double timeout_seconds) {
  Handle h;
  h.curl = curl_easy_init();
  QUARTET_CHECK(h.curl, "curl_easy_init failed");
  set_common(h.curl, url_, h.error, timeout_seconds);
  curl_easy_setopt(h.curl, CURLOPT_CONNECT_ONLY, 1L);
  const CURLcode rc = curl_easy_perform(h.curl);
  if (rc != CURLE_OK) transport_failed("connecting to " + url_, rc, h.error);
}

}  // namespace quartet
