import APNSCore
import PushCore
import PushStores
import PushPipeline
import PushPipelineTesting
import Synchronization
import Testing

/// ``RetryingSender/deliverAll(_:consumedAt:fence:report:)``: a batch follows the rules of
/// one ``RetryingSender/deliver(_:environment:consumedAt:fence:)`` per request.
@Suite(.timeLimit(.minutes(1)))
struct RetryingSenderBatchTests {
    /// Every kind of answer and every reason not to send, one request each.
    static let scripts: [String: [ScriptedAPNSClient.Answer]] = [
        "ok": [.status(200)],
        "retried": [.status(503, .serviceUnavailable), .status(429, .tooManyRequests), .status(200)],
        "gone": [.status(410, .unregistered, timestamp: 1_700_000_000_123)],
        "bad": [.status(400, .badDeviceToken)],
        "lost": [.transport(.connectionFailed("refused")), .status(200)],
        "busy": [.status(503, .serviceUnavailable)],
    ]
    static let tokens = ["ok", "retried", "gone", "bad", "lost", "busy", "expired", "fenced"]

    static func requests() -> [(request: APNSRequest, environment: APNSEnvironment)] {
        tokens.map { token in
            // "expired" expired in 2001: no attempt may start.
            let expiration: Int64? = token == "expired" ? 1_000_000_000 : nil
            return (RetryingSenderTests.request(token, expiration: expiration), .production)
        }
    }

    /// Runs a batch and returns each request's reports by index.
    static func reports(
        _ requests: [(request: APNSRequest, environment: APNSEnvironment)],
        through sender: RetryingSender,
        unless fenced: @escaping @Sendable (Int) -> Bool = { _ in false }
    ) async -> [Int: [Result<DeliveryOutcome, DeliveryStopped>]] {
        let reports = Mutex<[Int: [Result<DeliveryOutcome, DeliveryStopped>]]>([:])
        await sender.deliverAll(requests, consumedAt: .now, fence: { index in .checking { fenced(index) } }) { index, result in
            reports.withLock { $0[index, default: []].append(result) }
        }
        return reports.withLock { $0 }
    }

    @Test func eachRequestIsReportedOnceWithTheOutcomeItsOwnDeliveryGives() async throws {
        let requests = Self.requests()
        let fencedIndex = Self.tokens.firstIndex(of: "fenced")!
        let batchClient = ScriptedAPNSClient(scripts: Self.scripts, afterwards: .repeatLast)
        let batch = RetryingSender(client: batchClient, policy: RetryingSenderTests.fastPolicy)
        let reports = await Self.reports(requests, through: batch) { $0 == fencedIndex }

        #expect(reports.keys.sorted() == Array(requests.indices))
        #expect(reports.values.allSatisfy { $0.count == 1 }, "one report per request")
        // The same requests, each on its own through a client with the same scripts.
        let aloneClient = ScriptedAPNSClient(scripts: Self.scripts, afterwards: .repeatLast)
        let alone = RetryingSender(client: aloneClient, policy: RetryingSenderTests.fastPolicy)
        for (index, (request, environment)) in requests.enumerated() {
            let expected: Result<DeliveryOutcome, DeliveryStopped>
            do throws(DeliveryStopped) {
                expected = .success(
                    try await alone.deliver(request, environment: environment, consumedAt: .now, fence: .checking { index == fencedIndex }))
            } catch {
                expected = .failure(error)
            }
            #expect(reports[index]?.first == expected, "\(Self.tokens[index])")
            #expect(batchClient.callCount(request.deviceToken) == aloneClient.callCount(request.deviceToken))
        }
        // What the batch found, spelled out.
        let outcomes = reports.mapValues { try? $0[0].get() }
        #expect(outcomes[0]??.status == .delivered)
        #expect(outcomes[1]??.attempts == 3)
        #expect(outcomes[2]??.unregisteredAtMilliseconds == 1_700_000_000_123)
        #expect(outcomes[3]??.status == .rejected)
        #expect(outcomes[4]??.attempts == 2)
        #expect(outcomes[5]??.status == .failed)
        #expect(outcomes[6]??.status == .expired)
        #expect(reports[fencedIndex]?.first == .failure(.fenced))
        #expect(batchClient.callCount("expired") == 0 && batchClient.callCount("fenced") == 0)
    }

    @Test func aCancelledBatchReportsEveryRequestOnce() async throws {
        let client = ScriptedAPNSClient(scripts: ["busy": [.status(503)], "slow": [.status(429)]], afterwards: .repeatLast)
        var policy = RetryingSenderTests.fastPolicy
        policy.initialBackoff = .seconds(10)
        policy.maximumBackoff = .seconds(10)
        let sender = RetryingSender(client: client, policy: policy)
        let requests = ["ok", "busy", "slow"].map { (request: RetryingSenderTests.request($0), environment: APNSEnvironment.production) }
        let started = ContinuousClock.now
        let reports = await withTaskGroup(of: [Int: [Result<DeliveryOutcome, DeliveryStopped>]].self) { group in
            group.addTask { await Self.reports(requests, through: sender) }
            try? await Task.sleep(for: .milliseconds(100))
            group.cancelAll()
            return await group.next()!
        }
        #expect(started.duration(to: .now) < .seconds(5), "the retries' backoff ended with the cancellation")
        #expect(reports[0]?.count == 1)
        #expect((try? reports[0]?.first?.get())?.status == .delivered)
        #expect(reports[1] == [.failure(.cancelled)])
        #expect(reports[2] == [.failure(.cancelled)])
    }
}
