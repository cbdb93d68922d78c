import FCMCore
import PushCore
import Testing

/// Builds answers as FCM sends them (docs/design.md, "Talking to FCM") and checks their classification.
enum Answers {
    static let now: Int64 = 1_790_000_000_000

    static func error(
        _ status: Int,
        canonical: String?,
        errorCode: String?,
        violations: [String] = [],
        message: String = "m",
        retryAfter: String? = nil
    ) -> FCMResponse {
        var details: [String] = []
        if let errorCode {
            details.append(#"{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#(errorCode)"}"#)
        }
        if !violations.isEmpty {
            let list = violations.map { #"{"field":"\#($0)","description":"bad"}"# }.joined(separator: ",")
            details.append(#"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[\#(list)]}"#)
        }
        let statusMember = canonical.map { #","status":"\#($0)""# } ?? ""
        let body = #"{"error":{"code":\#(status),"message":"\#(message)"\#(statusMember),"details":[\#(details.joined(separator: ","))]}}"#
        return FCMResponse(status: status, body: Array(body.utf8), retryAfterHeader: retryAfter, nowMilliseconds: now)
    }

    static func raw(_ status: Int, _ body: String, retryAfter: String? = nil) -> FCMResponse {
        FCMResponse(status: status, body: Array(body.utf8), retryAfterHeader: retryAfter, nowMilliseconds: now)
    }

    static let invalidTokenMessage = "The registration token is not a valid FCM registration token"

    static let htmlNotFound = "<!DOCTYPE html><html lang=en><title>Error 404 (Not Found)!!1</title></html>"
}

@Suite("FCM answers classified as docs/design.md says")
struct ClassificationTests {
    @Test func successCarriesTheMessageName() {
        let response = Answers.raw(200, #"{"name":"projects/demo/messages/0:1234%abc"}"#)
        #expect(response.decision == .delivered)
        #expect(response.messageName == "projects/demo/messages/0:1234%abc")
        #expect(response.reason == nil)
    }

    @Test func unregisteredMarksTheToken() {
        let response = Answers.error(404, canonical: "NOT_FOUND", errorCode: "UNREGISTERED")
        #expect(response.decision == .unregistered)
        #expect(response.reason == "UNREGISTERED")
    }

    @Test(arguments: ["message.token", "message.fid"])
    func invalidArgumentNamingTheTargetIsUnregistered(field: String) {
        let response = Answers.error(400, canonical: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", violations: [field])
        #expect(response.decision == .unregistered)
        #expect(response.reason == "INVALID_ARGUMENT")
    }

    /// Google's current answer to an invalid token: no BadRequest, only the message says so.
    @Test(arguments: [Answers.invalidTokenMessage, "Invalid registration token", "REGISTRATION TOKEN is malformed"])
    func invalidArgumentSpeakingOfTheRegistrationTokenIsUnregistered(message: String) {
        let response = Answers.error(400, canonical: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", message: message)
        #expect(response.error?.message == message)
        #expect(response.decision == .unregistered)
        #expect(response.reason == "INVALID_ARGUMENT")
    }

    /// A violation naming another field, or a message that does not speak of the registration
    /// token, is the message's fault, whatever else the answer says.
    @Test(arguments: [
        (["message.data[0].value"], "m"), (["message.android.ttl"], "m"), (["message.token", "message.data"], "m"),
        ([], "m"), ([], "Request contains an invalid argument."), ([], "The registration is not valid"),
        (["message.data[0].value"], Answers.invalidTokenMessage), (["message.token", "message.data"], Answers.invalidTokenMessage),
    ])
    func invalidArgumentNamingAnythingElseIsRejected(fields: [String], message: String) {
        let response = Answers.error(400, canonical: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", violations: fields, message: message)
        #expect(response.decision == .rejected)
    }

    @Test func senderIDMismatchIsRejectedWithoutMarking() {
        let response = Answers.error(403, canonical: "PERMISSION_DENIED", errorCode: "SENDER_ID_MISMATCH")
        #expect(response.decision == .rejected)
        #expect(response.reason == "SENDER_ID_MISMATCH")
    }

    @Test func thirdPartyAuthErrorIsRejectedNotRefreshed() {
        let response = Answers.error(401, canonical: "UNAUTHENTICATED", errorCode: "THIRD_PARTY_AUTH_ERROR")
        #expect(response.decision == .rejected)
        #expect(response.reason == "THIRD_PARTY_AUTH_ERROR")
    }

    /// APNS_AUTH_ERROR is the older name of THIRD_PARTY_AUTH_ERROR (the Admin SDKs map both to
    /// one error); the reason stays as Google sent it.
    @Test func apnsAuthErrorIsRejectedNotRefreshed() {
        let response = Answers.error(401, canonical: "UNAUTHENTICATED", errorCode: "APNS_AUTH_ERROR")
        #expect(response.decision == .rejected)
        #expect(response.reason == "APNS_AUTH_ERROR")
        #expect(FCMErrorCode.apnsAuthError.isKnown)
    }

    /// The minute Google asks for after QUOTA_EXCEEDED is the sender's rule
    /// (``RetryPolicy/quotaExceededWait``): the classifier passes Retry-After on, and says whose
    /// quota it was (the project's without a QuotaFailure).
    @Test func quotaExceededCarriesRetryAfterAndWhoseQuota() {
        let short = Answers.error(429, canonical: "RESOURCE_EXHAUSTED", errorCode: "QUOTA_EXCEEDED", retryAfter: "5")
        #expect(short.retryAfter == .seconds(5))
        #expect(short.decision == .retry(FCMRetry(notBefore: .seconds(5), serverTrouble: false, quota: .project)))
        let none = Answers.error(429, canonical: "RESOURCE_EXHAUSTED", errorCode: "QUOTA_EXCEEDED")
        #expect(none.decision == .retry(FCMRetry(notBefore: nil, serverTrouble: false, quota: .project)))
    }

    @Test(arguments: [(503, "UNAVAILABLE"), (500, "INTERNAL")])
    func serverTroubleRetriesHonouringRetryAfter(status: Int, code: String) {
        let withHeader = Answers.error(status, canonical: code, errorCode: code, retryAfter: "7")
        #expect(withHeader.decision == .retry(FCMRetry(notBefore: .seconds(7), serverTrouble: true)))
        let without = Answers.error(status, canonical: code, errorCode: code)
        #expect(without.decision == .retry(FCMRetry(notBefore: nil, serverTrouble: true)))
    }

    @Test func expiredAccessTokenRefreshesOnceThenIsRejected() {
        var response = Answers.error(401, canonical: "UNAUTHENTICATED", errorCode: nil)
        #expect(response.decision == .refreshAccessToken)
        #expect(response.reason == "UNAUTHENTICATED")
        response.accessTokenRefreshed = true
        #expect(response.decision == .rejected)
    }

    @Test func htmlNotFoundIsRejectedAndMarksNothing() {
        let response = Answers.raw(404, Answers.htmlNotFound)
        #expect(response.error == nil)
        #expect(response.decision == .rejected)
        #expect(response.reason == nil)
    }

    @Test func forbiddenWithoutFcmErrorIsRejected() {
        let disabled = Answers.error(403, canonical: "PERMISSION_DENIED", errorCode: nil)
        #expect(disabled.decision == .rejected)
        #expect(disabled.reason == "PERMISSION_DENIED")
        #expect(Answers.raw(403, "Forbidden").decision == .rejected)
    }

    /// The bare status never decides: a 404 or 400 marks a token only through FcmError.
    @Test func bareStatusesNeverMarkATokenNorRetryA4xx() {
        #expect(Answers.error(404, canonical: "NOT_FOUND", errorCode: nil).decision == .rejected)
        // Without the FcmError detail even a violation naming the token marks nothing.
        #expect(Answers.error(400, canonical: "INVALID_ARGUMENT", errorCode: nil, violations: ["message.token"]).decision == .rejected)
        #expect(Answers.raw(400, "").decision == .rejected)
        #expect(Answers.raw(410, "").decision == .rejected)
    }

    @Test func gatewayErrorsWithoutABodyAreRetried() {
        #expect(Answers.raw(502, "<html>bad gateway</html>").decision == .retry(FCMRetry(notBefore: nil, serverTrouble: true)))
        #expect(Answers.raw(429, "", retryAfter: "3").decision == .retry(FCMRetry(notBefore: .seconds(3), serverTrouble: false)))
    }

    @Test func unknownErrorCodeFallsBackOnTheCanonicalStatus() {
        let unknown = Answers.error(503, canonical: "UNAVAILABLE", errorCode: "SOMETHING_NEW")
        #expect(unknown.decision == .retry(FCMRetry(notBefore: nil, serverTrouble: true)))
        #expect(unknown.reason == "SOMETHING_NEW")
        #expect(!FCMErrorCode(rawValue: "SOMETHING_NEW").isKnown)
        #expect(FCMErrorCode.unregistered.isKnown)
        let unspecified = Answers.error(400, canonical: "FAILED_PRECONDITION", errorCode: "UNSPECIFIED_ERROR")
        #expect(unspecified.decision == .rejected)
    }

    /// A canonical status Herald does not know decides nothing: the HTTP status does, as the
    /// Admin SDKs retry 500 and 503 whatever the body says.
    @Test(arguments: ["UNKNOWN", "DATA_LOSS"])
    func unknownCanonicalStatusIsRetriedByItsHTTPStatus(canonical: String) {
        let internalError = Answers.error(500, canonical: canonical, errorCode: nil)
        #expect(internalError.decision == .retry(FCMRetry(notBefore: nil, serverTrouble: true)))
        #expect(internalError.reason == canonical)
        let unavailable = Answers.error(503, canonical: canonical, errorCode: "SOMETHING_NEW", retryAfter: "4")
        #expect(unavailable.decision == .retry(FCMRetry(notBefore: .seconds(4), serverTrouble: true)))
        #expect(unavailable.reason == "SOMETHING_NEW")
        let tooMany = Answers.error(429, canonical: canonical, errorCode: nil, retryAfter: "2")
        #expect(tooMany.decision == .retry(FCMRetry(notBefore: .seconds(2), serverTrouble: false)))
        #expect(Answers.error(400, canonical: canonical, errorCode: nil).decision == .rejected)
    }

    @Test func errorBodyKeepsEveryFieldViolation() throws {
        let response = Answers.error(400, canonical: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT", violations: ["a", "b"])
        let error = try #require(response.error)
        #expect(error.code == 400)
        #expect(error.message == "m")
        #expect(error.status == "INVALID_ARGUMENT")
        #expect(error.errorCode == .invalidArgument)
        #expect(error.fieldViolations.map(\.field) == ["a", "b"])
    }
}

@Suite("Retry-After as seconds or an HTTP date")
struct RetryAfterTests {
    @Test func secondsAndDates() {
        #expect(RetryAfter.parse("120", nowMilliseconds: 0) == .seconds(120))
        #expect(RetryAfter.parse(" 0 ", nowMilliseconds: 0) == .zero)
        // 1994-11-06T08:49:37Z is 784111777 s; 1.5 s before it.
        #expect(RetryAfter.parse("Sun, 06 Nov 1994 08:49:37 GMT", nowMilliseconds: 784_111_775_500) == .milliseconds(1500))
        #expect(RetryAfter.parse("Sun, 06 Nov 1994 08:49:37 GMT", nowMilliseconds: 784_111_999_000) == .zero)
        #expect(RetryAfter.parse("Thu, 01 Jan 1970 00:00:10 GMT", nowMilliseconds: 0) == .seconds(10))
        #expect(RetryAfter.parse("Tue, 29 Feb 2028 00:00:00 GMT", nowMilliseconds: 1_835_395_200_000 - 2000) == .seconds(2))
    }

    @Test func garbageIsIgnoredAndHugeValuesCapped() {
        #expect(RetryAfter.parse("soon", nowMilliseconds: 0) == nil)
        #expect(RetryAfter.parse("-5", nowMilliseconds: 0) == nil)
        #expect(RetryAfter.parse("1.5", nowMilliseconds: 0) == nil)
        #expect(RetryAfter.parse("Sun, 06 Nov 1994 08:49:37 UTC", nowMilliseconds: 0) == nil)
        #expect(RetryAfter.parse("99999999999999999999", nowMilliseconds: 0) == RetryAfter.maximum)
    }
}
