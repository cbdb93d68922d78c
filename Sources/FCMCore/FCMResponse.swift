import PushCore
import JSONCore

/// FCM's answer to one send request.
public struct FCMResponse: Sendable, Hashable {
    /// The HTTP status (200 on success).
    public var status: Int
    /// The `name` of a 200 answer: `projects/<project>/messages/<id>` (the result's `fcm_message_id`).
    public var messageName: String?
    /// The parsed `google.rpc.Status` of an error answer; nil on success or when the body is not
    /// one (an HTML error page).
    public var error: FCMErrorBody?
    /// The wait `Retry-After` asked for, from when the answer arrived; nil without the header.
    public var retryAfter: Duration?
    /// Whether the client already refreshed its access token once for this request (after a
    /// 401 UNAUTHENTICATED), so a second 401 is final.
    public var accessTokenRefreshed: Bool

    public init(
        status: Int,
        messageName: String? = nil,
        error: FCMErrorBody? = nil,
        retryAfter: Duration? = nil,
        accessTokenRefreshed: Bool = false
    ) {
        self.status = status
        self.messageName = messageName
        self.error = error
        self.retryAfter = retryAfter
        self.accessTokenRefreshed = accessTokenRefreshed
    }

    /// Reads an answer: `status`, its body and its `Retry-After` header (seconds or an HTTP
    /// date, the latter against `nowMilliseconds` of the wall clock).
    public init(status: Int, body: some Collection<UInt8>, retryAfterHeader: String?, nowMilliseconds: Int64) {
        self.init(status: status)
        if (200..<300).contains(status) {
            messageName = (try? JSONValue(parsing: body))?["name"]?.stringValue
        } else {
            error = FCMErrorBody(parsing: body)
        }
        retryAfter = retryAfterHeader.flatMap { RetryAfter.parse($0, nowMilliseconds: nowMilliseconds) }
    }

    /// The result's `reason`: the FcmError `errorCode`, else the canonical `error.status`; nil
    /// on success and for an answer without a `google.rpc.Status` body.
    public var reason: String? {
        guard !(200..<300).contains(status) else { return nil }
        return error?.errorCode?.rawValue ?? error?.status
    }

    /// What this answer means for the notification: ``FCMDecision/classify(_:)``.
    public var decision: FCMDecision { FCMDecision.classify(self) }
}

/// What an FCM answer means for one notification, decided by the FcmError detail's `errorCode`,
/// then the canonical `error.status`, and only then the HTTP status (docs/design.md).
public enum FCMDecision: Sendable, Hashable {
    /// 2xx: FCM accepted the message.
    case delivered
    /// The target is gone: UNREGISTERED, or INVALID_ARGUMENT that blames the registration token
    /// (``FCMErrorBody/blamesTarget``). Mark the token (ordering rule) and publish push.unregistered.
    case unregistered
    /// FCM refused the message and a retry cannot help; the token is not marked. Other
    /// INVALID_ARGUMENT, SENDER_ID_MISMATCH, THIRD_PARTY_AUTH_ERROR (or its older name
    /// APNS_AUTH_ERROR), a second 401 after a token refresh, and any other 4xx but 429 (a
    /// disabled API's 403, a wrong URL's 404).
    case rejected
    /// Try this notification again, no sooner than ``FCMRetry/notBefore``: QUOTA_EXCEEDED,
    /// UNAVAILABLE, INTERNAL, their canonical statuses, and any other 429 or 5xx.
    case retry(FCMRetry)
    /// 401 UNAUTHENTICATED without a known FcmError: the access token was refused (expired or
    /// revoked). Refresh it and retry once; the client does this, so a caller sees it only as
    /// ``rejected``.
    case refreshAccessToken

    /// Classifies `response`.
    public static func classify(_ response: FCMResponse) -> FCMDecision {
        if (200..<300).contains(response.status) { return .delivered }
        let error = response.error
        let retryAfter = response.retryAfter
        switch error?.errorCode {
        case .unregistered?:
            return .unregistered
        case .invalidArgument?:
            return error?.blamesTarget == true ? .unregistered : .rejected
        case .senderIDMismatch?, .thirdPartyAuthError?, .apnsAuthError?:
            return .rejected
        case .quotaExceeded?:
            return .retry(FCMRetry(notBefore: retryAfter, serverTrouble: false, quota: error?.quotaScope ?? .project))
        case .unavailable?, .internal?:
            return .retry(FCMRetry(notBefore: retryAfter, serverTrouble: true))
        default:
            break
        }
        // No known FcmError code: a canonical status Herald knows decides.
        switch error?.status {
        case "UNAUTHENTICATED"?:
            return response.accessTokenRefreshed ? .rejected : .refreshAccessToken
        case "RESOURCE_EXHAUSTED"?:
            return .retry(FCMRetry(notBefore: retryAfter, serverTrouble: false))
        case "UNAVAILABLE"?, "INTERNAL"?, "DEADLINE_EXCEEDED"?:
            return .retry(FCMRetry(notBefore: retryAfter, serverTrouble: true))
        default:
            break
        }
        // Any other canonical status (UNKNOWN, or the 4xx ones such as NOT_FOUND), or no
        // google.rpc.Status at all (an HTML page from a proxy or a wrong URL): the HTTP status
        // decides, as the Admin SDKs retry 500 and 503 whatever the body says. 429 and 5xx are
        // transient like a lost connection; anything else is final. Neither marks a token.
        switch response.status {
        case 429: return .retry(FCMRetry(notBefore: retryAfter, serverTrouble: false))
        case 500...599: return .retry(FCMRetry(notBefore: retryAfter, serverTrouble: true))
        default: return .rejected
        }
    }
}

/// How to retry a notification after an FCM answer.
public struct FCMRetry: Sendable, Hashable {
    /// The least wait before the next attempt (`Retry-After`); nil leaves the wait to the
    /// caller's backoff. A caller waits the longer of this and its backoff (and, after
    /// QUOTA_EXCEEDED, at least the minute Google asks for).
    public var notBefore: Duration?
    /// FCM itself is in trouble (500, 503): back off exponentially and slow every send to the
    /// project down, not only this notification.
    public var serverTrouble: Bool
    /// QUOTA_EXCEEDED, and whose quota ran out; nil for any other answer.
    public var quota: FCMQuota?

    public init(notBefore: Duration?, serverTrouble: Bool, quota: FCMQuota? = nil) {
        self.notBefore = notBefore
        self.serverTrouble = serverTrouble
        self.quota = quota
    }
}

/// Whose sending quota a QUOTA_EXCEEDED answer says ran out.
public enum FCMQuota: Sendable, Hashable {
    /// The Firebase project's (600,000 messages a minute by default): every send to the project
    /// waits for the window to roll.
    case project
    /// One device's (240 a minute, 5,000 an hour): only sends to that device wait.
    case device
}
