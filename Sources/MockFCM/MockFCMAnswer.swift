import JSONCore

/// What the mock sends back for one request: status, headers and body.
struct MockFCMAnswer: Sendable {
    var status: Int
    var headers: [(String, String)] = []
    var body: String
    var contentType = "application/json; charset=UTF-8"
    /// The FcmError code or canonical status, for the log and the counters.
    var reason: String?

    static let fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
    static let badRequestType = "type.googleapis.com/google.rpc.BadRequest"

    /// A `google.rpc.Status` error as FCM writes it, with an FcmError detail when `errorCode`
    /// is given and a BadRequest detail for `violations` (field, description); members in
    /// alphabetical order, compact.
    /// Source: https://firebase.google.com/docs/cloud-messaging/error-codes (the two example answers).
    static func rpcError(
        _ status: Int,
        canonical: String,
        message: String,
        errorCode: String? = nil,
        violations: [(String, String)] = [],
        quotaViolations: [(subject: String, description: String)] = [],
        retryAfterSeconds: Int? = nil
    ) -> MockFCMAnswer {
        var details: [JSONValue] = []
        if let errorCode { details.append(.object([.init("@type", .string(fcmErrorType)), .init("errorCode", .string(errorCode))])) }
        if !violations.isEmpty {
            let fieldViolations = violations.map { JSONValue.object([.init("description", .string($0.1)), .init("field", .string($0.0))]) }
            details.append(.object([.init("@type", .string(badRequestType)), .init("fieldViolations", .array(fieldViolations))]))
        }
        if !quotaViolations.isEmpty {
            let violations = quotaViolations.map { JSONValue.object([.init("description", .string($0.description)), .init("subject", .string($0.subject))]) }
            details.append(.object([.init("@type", .string("type.googleapis.com/google.rpc.QuotaFailure")), .init("violations", .array(violations))]))
        }
        var error: [JSONValue.Member] = [.init("code", .number(String(status)))]
        if !details.isEmpty { error.append(.init("details", .array(details))) }
        error += [.init("message", .string(message)), .init("status", .string(canonical))]
        let body = JSONValue.object([.init("error", .object(error))]).serialized()
        var answer = MockFCMAnswer(status: status, body: String(decoding: body, as: UTF8.self), reason: errorCode ?? canonical)
        if let retryAfterSeconds { answer.headers.append(("retry-after", String(retryAfterSeconds))) }
        return answer
    }

    /// 400 INVALID_ARGUMENT with the FcmError detail and a BadRequest violation on `field`.
    /// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (INVALID_ARGUMENT: a google.rpc.BadRequest names the field).
    static func invalidArgument(_ field: String, _ description: String) -> MockFCMAnswer {
        rpcError(
            400,
            canonical: "INVALID_ARGUMENT",
            message: description,
            errorCode: "INVALID_ARGUMENT",
            violations: [(field, description)]
        )
    }

    /// Google's front end answers an unknown path with an HTML page, no google.rpc.Status.
    /// Source: firebase-admin-node src/utils/api-request.ts and firebase-admin-go internal/errors.go
    /// (a non-JSON error body is read by its HTTP status alone: "unexpected response").
    static let htmlNotFound = MockFCMAnswer(
        status: 404,
        body: """
            <!DOCTYPE html>
            <html lang=en><meta charset=utf-8><title>Error 404 (Not Found)!!1</title>
            <p><b>404.</b> <ins>That’s an error.</ins><p>The requested URL was not found on this server. <ins>That’s all we know.</ins>
            """,
        contentType: "text/html; charset=UTF-8",
        reason: nil
    )

    /// An expired or revoked access token.
    /// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (UNSPECIFIED_ERROR / 401
    /// UNAUTHENTICATED) and https://cloud.google.com/apis/design/errors (the UNAUTHENTICATED message).
    static let unauthenticated = rpcError(
        401,
        canonical: "UNAUTHENTICATED",
        message:
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."
    )

    /// 200 with an object of `members`, in the order given (FCM's answers list them alphabetically).
    /// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages/send (the
    /// response body is a Message whose `name` is `projects/*/messages/{message_id}`).
    static func success(_ members: [JSONValue.Member]) -> MockFCMAnswer {
        MockFCMAnswer(status: 200, body: String(decoding: JSONValue.object(members).serialized(), as: UTF8.self))
    }
}
