import JSONCore

/// The `errorCode` of FCM's `FcmError` detail.
///
/// A struct with a static member per documented code, not an enum: a code Google adds later is
/// a value like any other (its string kept), and a new static member breaks no caller's `switch`.
public struct FCMErrorCode: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    /// Google's spelling of the code.
    public let rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { rawValue }

    /// Whether this version of Herald names the code (a static member).
    public var isKnown: Bool { Self.documented.contains(self) }

    public static let unspecifiedError = FCMErrorCode(rawValue: "UNSPECIFIED_ERROR")
    /// 400: a message parameter is invalid; a field violation says which.
    public static let invalidArgument = FCMErrorCode(rawValue: "INVALID_ARGUMENT")
    /// 404: the token is no longer valid (the app was uninstalled, or 270 days without use).
    public static let unregistered = FCMErrorCode(rawValue: "UNREGISTERED")
    /// 403: the token belongs to another Firebase project than the credential's.
    public static let senderIDMismatch = FCMErrorCode(rawValue: "SENDER_ID_MISMATCH")
    /// 429: the project's or the device's quota is exceeded.
    public static let quotaExceeded = FCMErrorCode(rawValue: "QUOTA_EXCEEDED")
    /// 503: FCM is overloaded.
    public static let unavailable = FCMErrorCode(rawValue: "UNAVAILABLE")
    /// 500: an unknown internal error.
    public static let `internal` = FCMErrorCode(rawValue: "INTERNAL")
    /// 401: the APNs certificate or web push key configured in Firebase is invalid or missing.
    public static let thirdPartyAuthError = FCMErrorCode(rawValue: "THIRD_PARTY_AUTH_ERROR")
    /// 401: the older name of ``thirdPartyAuthError``, which the Admin SDKs still map to the same
    /// error (firebase-admin-go `messaging/messaging_errors.go`, firebase-admin-python `messaging.py`).
    public static let apnsAuthError = FCMErrorCode(rawValue: "APNS_AUTH_ERROR")

    static let documented: Set<FCMErrorCode> = [
        .unspecifiedError, .invalidArgument, .unregistered, .senderIDMismatch, .quotaExceeded,
        .unavailable, .internal, .thirdPartyAuthError, .apnsAuthError,
    ]
}

/// The `google.rpc.Status` body of an FCM error answer, with the details Herald reads.
public struct FCMErrorBody: Sendable, Hashable {
    /// A `google.rpc.BadRequest` field violation: the field (`message.token`) and why.
    public struct FieldViolation: Sendable, Hashable {
        public var field: String
        public var description: String

        public init(field: String, description: String) {
            self.field = field
            self.description = description
        }
    }

    /// A `google.rpc.QuotaFailure` violation: whose quota (`subject`) and which.
    public struct QuotaViolation: Sendable, Hashable {
        public var subject: String
        public var description: String

        public init(subject: String, description: String) {
            self.subject = subject
            self.description = description
        }
    }

    /// `error.code`: the HTTP status Google meant.
    public var code: Int?
    /// `error.message`, for humans.
    public var message: String?
    /// `error.status`: the canonical code (`INVALID_ARGUMENT`, `UNAUTHENTICATED`…).
    public var status: String?
    /// The `FcmError` detail's `errorCode`; nil when the answer has no such detail.
    public var errorCode: FCMErrorCode?
    /// Every field violation of the `google.rpc.BadRequest` details.
    public var fieldViolations: [FieldViolation]
    /// Every violation of the `google.rpc.QuotaFailure` details.
    public var quotaViolations: [QuotaViolation] = []

    public init(
        code: Int? = nil,
        message: String? = nil,
        status: String? = nil,
        errorCode: FCMErrorCode? = nil,
        fieldViolations: [FieldViolation] = []
    ) {
        self.code = code
        self.message = message
        self.status = status
        self.errorCode = errorCode
        self.fieldViolations = fieldViolations
    }

    static let fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
    static let badRequestType = "type.googleapis.com/google.rpc.BadRequest"
    static let quotaFailureType = "type.googleapis.com/google.rpc.QuotaFailure"

    /// Parses an answer's body; nil when it is not a `google.rpc.Status` (an HTML page, say).
    public init?(parsing body: some Collection<UInt8>) {
        guard let document = try? JSONValue(parsing: body), case .object? = document["error"], let error = document["error"] else {
            return nil
        }
        self.init()
        if case .number(let text)? = error["code"] { code = Int(text) }
        message = error["message"]?.stringValue
        status = error["status"]?.stringValue
        guard case .array(let details)? = error["details"] else { return }
        for detail in details {
            switch detail["@type"]?.stringValue {
            case Self.fcmErrorType:
                if errorCode == nil, let text = detail["errorCode"]?.stringValue { errorCode = FCMErrorCode(rawValue: text) }
            case Self.badRequestType:
                guard case .array(let violations)? = detail["fieldViolations"] else { continue }
                for violation in violations {
                    guard let field = violation["field"]?.stringValue else { continue }
                    fieldViolations.append(FieldViolation(field: field, description: violation["description"]?.stringValue ?? ""))
                }
            case Self.quotaFailureType:
                guard case .array(let violations)? = detail["violations"] else { continue }
                for violation in violations {
                    quotaViolations.append(
                        QuotaViolation(subject: violation["subject"]?.stringValue ?? "", description: violation["description"]?.stringValue ?? "")
                    )
                }
            default:
                continue
            }
        }
    }

    /// Whose quota a QUOTA_EXCEEDED answer says ran out: one device's when every QuotaFailure
    /// violation speaks of a device (its subject or description), else the project's (also when
    /// the answer names none: the project's quota is the one Google documents first).
    public var quotaScope: FCMQuota {
        let speaksOfDevice = { (violation: QuotaViolation) in
            (violation.subject + " " + violation.description).lowercased().contains("device")
        }
        return !quotaViolations.isEmpty && quotaViolations.allSatisfy(speaksOfDevice) ? .device : .project
    }

    /// Whether the field violations name the message's target (`message.token` or
    /// `message.fid`) and nothing else.
    public var namesOnlyTarget: Bool {
        !fieldViolations.isEmpty
            && fieldViolations.allSatisfy { violation in
                ["message.token", "message.fid"].contains { violation.field == $0 || violation.field.hasPrefix($0 + ".") }
            }
    }

    /// Whether an INVALID_ARGUMENT answer blames the message's target rather than the message,
    /// in either of Google's shapes: field violations that name only the target (the older
    /// shape), or no field violation and a `message` that speaks of the registration token,
    /// that is contains "registration token" in any case (today's "The registration token is
    /// not a valid FCM registration token"). A violation naming another field, or any other
    /// message, blames the message.
    public var blamesTarget: Bool {
        guard fieldViolations.isEmpty else { return namesOnlyTarget }
        return message?.lowercased().contains("registration token") ?? false
    }
}
