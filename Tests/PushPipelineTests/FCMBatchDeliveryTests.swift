import PushStores
import FCMCore
import PushPipeline
import PushPipelineTesting
import Synchronization
import Testing

/// ``RetryingSender/deliverAll(_:consumedAt:fence:report:)`` for Android devices: one report
/// per request, FCM's rules applied to each first answer where it arrives, retries after their
/// wait, fenced requests never sent.
@Suite(.timeLimit(.minutes(1)))
struct FCMBatchDeliveryTests {
    /// Answers from a script per target (each answer once, in order; then 200), recording sends.
    final class ScriptedBatchClient: FCMClientProtocol {
        private let script: Mutex<[String: [FCMResponse]]>
        private let sent = Mutex<[String]>([])

        init(_ script: [String: [FCMResponse]]) {
            self.script = Mutex(script)
        }

        func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse {
            let target = request.target.value
            sent.withLock { $0.append(target) }
            return script.withLock { script in script[target]?.isEmpty == false ? script[target]?.removeFirst() : nil }
                ?? FCMResponse(status: 200, messageName: "projects/p/messages/\(target)")
        }

        func sends(to target: String) -> Int { sent.withLock { sent in sent.count { $0 == target } } }
    }

    static func request(_ token: String) throws -> FCMRequest {
        let json = #"{"package":"com.example.shop","message":{"data":{"order":"7"}}}"#
        return try FCMEventPart(json: Array(json.utf8), priority: 10, expiration: nil, collapseID: nil, nowMilliseconds: 0).request(to: .token(token))
    }

    @Test func eachRequestIsReportedOnceWithFCMsRules() async throws {
        let unavailable = FCMResponse(status: 503, error: FCMErrorBody(code: 503, status: "UNAVAILABLE", errorCode: .unavailable))
        let gone = FCMResponse(status: 404, error: FCMErrorBody(code: 404, status: "NOT_FOUND", errorCode: .unregistered))
        let client = ScriptedBatchClient(["busy": [unavailable], "gone": [gone]])
        let sender = RetryingSender(
            client: ScriptedAPNSClient(),
            fcmClient: client,
            policy: RetryPolicy(maxAttempts: 3, initialBackoff: .milliseconds(1), maximumBackoff: .milliseconds(5))
        )
        let tokens = ["ok", "busy", "gone", "fenced"]
        let reports = Mutex<[Int: [Result<DeliveryOutcome, DeliveryStopped>]]>([:])
        await sender.deliverAll(try tokens.map(Self.request), consumedAt: .now) { index in
            .checking { tokens[index] == "fenced" }
        } report: { index, result in
            reports.withLock { $0[index, default: []].append(result) }
        }
        let byToken = reports.withLock { reports in Dictionary(uniqueKeysWithValues: reports.map { (tokens[$0.key], $0.value) }) }
        #expect(byToken.values.map(\.count) == [1, 1, 1, 1])
        let delivered = try #require(try byToken["ok"]?[0].get())
        #expect(delivered.status == .delivered && delivered.attempts == 1 && delivered.platform == .fcm)
        #expect(delivered.fcmMessageID == "projects/p/messages/ok")
        let retried = try #require(try byToken["busy"]?[0].get())
        #expect(retried.status == .delivered && retried.attempts == 2)
        #expect(client.sends(to: "busy") == 2)
        let unregistered = try #require(try byToken["gone"]?[0].get())
        #expect(unregistered.status == .unregistered && unregistered.reason == "UNREGISTERED")
        #expect(unregistered.unregisteredAtMilliseconds != nil)
        #expect(throws: DeliveryStopped.fenced) { try byToken["fenced"]?[0].get() }
        #expect(client.sends(to: "fenced") == 0)
    }
}
