import Foundation

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
    /// is given and a BadRequest detail for `violations` (field, description).
    static func rpcError(
        _ status: Int,
        canonical: String,
        message: String,
        errorCode: String? = nil,
        violations: [(String, String)] = [],
        retryAfterSeconds: Int? = nil
    ) -> MockFCMAnswer {
        var details: [[String: Any]] = []
        if let errorCode { details.append(["@type": fcmErrorType, "errorCode": errorCode]) }
        if !violations.isEmpty {
            details.append([
                "@type": badRequestType,
                "fieldViolations": violations.map { ["field": $0.0, "description": $0.1] },
            ])
        }
        var error: [String: Any] = ["code": status, "message": message, "status": canonical]
        if !details.isEmpty { error["details"] = details }
        let data = (try? JSONSerialization.data(withJSONObject: ["error": error], options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        var answer = MockFCMAnswer(status: status, body: String(decoding: data, as: UTF8.self), reason: errorCode ?? canonical)
        if let retryAfterSeconds { answer.headers.append(("retry-after", String(retryAfterSeconds))) }
        return answer
    }

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

    static let unauthenticated = rpcError(
        401,
        canonical: "UNAUTHENTICATED",
        message:
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."
    )

    static func success(_ object: [String: Any]) -> MockFCMAnswer {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return MockFCMAnswer(status: 200, body: String(decoding: data, as: UTF8.self))
    }
}
