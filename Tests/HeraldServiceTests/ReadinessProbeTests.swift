@testable import HeraldService
import Synchronization
import Testing

@Suite struct ReadinessProbeTests {
    /// An operation that ignores cancellation until released, like a query on a dead connection.
    final class StuckOperation: Sendable {
        let invocations = Atomic(0)
        private let released = Atomic(false)

        func run() async throws {
            invocations.add(1, ordering: .relaxed)
            while !released.load(ordering: .relaxed) {
                try? await Task.sleep(for: .milliseconds(5))
            }
        }

        func release() { released.store(true, ordering: .relaxed) }
    }

    @Test func aStuckProbeIsNeverStartedTwiceAndChecksAnswerWithinTheirLimit() async throws {
        let operation = StuckOperation()
        let probe = SingleFlightProbe(timeout: .milliseconds(50)) { try await operation.run() }
        let enforcing = Task { await probe.run() }
        defer { enforcing.cancel() }
        for _ in 0..<20 {
            let answered = await probe.check()
            #expect(!answered)
        }
        #expect(operation.invocations.load(ordering: .relaxed) == 1, "the outstanding probe is not duplicated")

        operation.release()
        var answered = false
        for _ in 0..<200 where !answered {
            answered = await probe.check()
            if !answered { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(answered, "a new probe runs once the stuck one has ended")
        #expect(operation.invocations.load(ordering: .relaxed) == 2)
    }

    @Test func unmetConditionsAreNamedInOrder() async {
        let unmet = await Readiness.unmetConditions(
            draining: true,
            consuming: true,
            joinedGroup: false,
            publishBlockedBy: ["_UNKNOWN_TOPIC"],
            storeBlockedBy: ["42P01"],
            apnsReachable: false,
            fcmTokenAvailable: false,
            database: { false }
        )
        #expect(
            unmet == [
                "shutting_down", "kafka_group_not_joined", "kafka_publish_blocked:_UNKNOWN_TOPIC", "postgres_failing:42P01",
                "postgres_unreachable", "apns_unreachable", "fcm_token_unavailable",
            ]
        )
        let ready = await Readiness.unmetConditions(
            draining: false,
            consuming: true,
            joinedGroup: true,
            publishBlockedBy: [],
            storeBlockedBy: [],
            apnsReachable: true,
            fcmTokenAvailable: true,
            database: { true }
        )
        #expect(ready.isEmpty)
    }
}
