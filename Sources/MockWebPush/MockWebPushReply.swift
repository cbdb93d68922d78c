import JSONCore

/// What the mock sends back for one request: status, headers and body, each error beside the
/// page that shows a push service answering so.
struct MockWebPushReply: Sendable {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8] = []

    /// A JSON body's reply.
    static func json(_ status: Int, _ value: JSONValue, headers: [(String, String)] = []) -> MockWebPushReply {
        MockWebPushReply(status: status, headers: [("content-type", "application/json")] + headers, body: value.serialized())
    }

    /// Mozilla autopush's error body: `{"code":..,"errno":..,"error":..,"message":..}`.
    /// Source: https://mozilla-services.github.io/autopush-rs/http.html (Response: "an extended
    /// error code object") and https://mozilla-services.github.io/autopush-rs/errors.html (the errnos).
    static func autopush(_ status: Int, errno: Int?, message: String, headers: [(String, String)] = []) -> MockWebPushReply {
        var members: [JSONValue.Member] = [.init("code", .number(String(status)))]
        if let errno { members.append(.init("errno", .number(String(errno)))) }
        members += [.init("error", .string(reasonPhrase(status))), .init("message", .string(message))]
        return json(status, .object(members), headers: headers)
    }

    /// Apple's web push error body: `{"reason":"..."}`.
    /// Source: https://developer.apple.com/documentation/usernotifications/sending-web-push-notifications-in-web-apps-and-browsers
    /// (the table of 403 reasons: BadJwtToken, VapidPkHashMismatch).
    static func apple(_ status: Int, reason: String) -> MockWebPushReply {
        json(status, .object([.init("reason", .string(reason))]))
    }

    /// autopush: 404 errno 102, "Invalid URL endpoint"; an endpoint the service never made.
    static let endpointNotFound = autopush(404, errno: 102, message: "Invalid URL endpoint")
    /// autopush: 410 errno 106, "Invalid subscription"; the user unsubscribed.
    static let subscriptionGone = autopush(410, errno: 106, message: "Invalid subscription")
    /// RFC 8292 §4.2: "A 401 (Unauthorized) status code might be used if the authentication is
    /// absent"; autopush: 401 errno 109, "Invalid authentication".
    static let unauthorized = autopush(401, errno: 109, message: "Invalid authentication", headers: [("www-authenticate", "vapid")])
    /// RFC 8292 §4.2: "a 403 (Forbidden) status code might be used if authentication is invalid";
    /// Apple's reason for a JWT that is missing, badly signed, for another origin, expired or with
    /// a `sub` that is no contact.
    static let badJwtToken = apple(403, reason: "BadJwtToken")
    /// Apple's reason when the VAPID key is not the one the subscription was made with
    /// (RFC 8292 §4.2: a restricted subscription refuses other keys).
    static let vapidKeyMismatch = apple(403, reason: "VapidPkHashMismatch")
    /// autopush: 400 errno 111, "Missing TTL Header" (RFC 8030 §5.2: TTL is required).
    static let missingTTL = autopush(400, errno: 111, message: "Missing TTL Header")
    /// autopush: 400 errno 112, "Invalid TTL header value": not a number of seconds.
    static let invalidTTL = autopush(400, errno: 112, message: "Invalid TTL header value")
    /// autopush answers a missing or unknown `Content-Encoding` with InvalidEncryption, 400
    /// errno 110 (autoendpoint/src/extractors/notification_headers.rs, validate_encryption); the
    /// mock knows `aes128gcm` only (RFC 8291 §4).
    static let badContentEncoding = autopush(400, errno: 110, message: "Unknown Content-Encoding header")
    /// autopush: 400 errno 113, "Invalid Topic header value" (RFC 8030 §5.4: at most 32
    /// characters of the base64url alphabet).
    static let invalidTopic = autopush(400, errno: 113, message: "Invalid Topic header value")
    /// RFC 8030 §5.3 defines four urgencies. No push service documents an answer to another
    /// one (autopush ignores the header), so the mock refuses it in autopush's shape without an
    /// errno: a sender's typo shows in its tests rather than as a silently normal urgency.
    static let invalidUrgency = autopush(400, errno: nil, message: "Urgency must be very-low, low, normal or high")
    /// RFC 8030 §7.2: a push message larger than the service takes is answered 413; autopush: 413
    /// errno 104, "Data payload too large".
    static let payloadTooLarge = autopush(413, errno: 104, message: "Data payload too large")
    /// What a subscription's user agent would make of a message it cannot decrypt, as a reason
    /// in Apple's shape (a real service cannot tell; autopush: "the message may still be rejected
    /// by the User Agent if there is an error with the message's encryption").
    static let badEncryption = apple(400, reason: "BadEncryption")
    /// An unknown path or method.
    static let notFound = autopush(404, errno: nil, message: "Not Found")

    /// A scripted status. autopush: 429 and 503 carry errno 201 ("Use exponential back-off for
    /// retries"), 500 errno 999 ("Unknown error"), 502 errno 902 (the connection upstream
    /// failed); autopush documents none for any other status.
    static func scripted(_ status: Int, retryAfterSeconds: Int?) -> MockWebPushReply {
        let errno: Int? =
            switch status {
            case 429, 503: 201
            case 500: 999
            case 502: 902
            default: nil
            }
        let headers = retryAfterSeconds.map { [("retry-after", String(max(0, $0)))] } ?? []
        return autopush(status, errno: errno, message: "Scripted answer", headers: headers)
    }

    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 410: "Gone"
        case 413: "Payload Too Large"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        default: "Error"
        }
    }
}
