import APNSCore
import PushCore
import Logging
import Synchronization
import Testing

@testable import PushPipeline

/// The retry engine's bookkeeping of permanent causes: counted each time one comes to hold a
/// piece of work, logged once per cause, named while anything is held, released with the last.
@Suite struct PersistentRetryTests {
    struct Failure: Error {}

    /// What the engine reported, in order.
    final class Reported: Sendable {
        let events = Mutex<[String]>([])
        func append(_ event: String) { events.withLock { $0.append(event) } }
    }

    static func engine(_ reported: Reported) -> PersistentRetry {
        let quick = Backoff(initial: .milliseconds(1), maximum: .milliseconds(2))
        return PersistentRetry(
            transientBackoff: quick,
            permanentBackoff: quick,
            reports: .init(
                held: { cause, _, first, metadata in reported.append("held \(cause) first=\(first) \(metadata["work"] ?? "")") },
                released: { cause in reported.append("released \(cause)") },
                transient: { _, attempt, metadata in reported.append("transient \(attempt) \(metadata["work"] ?? "")") }
            )
        )
    }

    @Test func aCauseHoldingTwoPiecesOfWorkIsLoggedOnceAndReleasedWithTheLast() async throws {
        let reported = Reported()
        let retry = Self.engine(reported)
        let (firstMayGo, letFirstGo) = AsyncStream.makeStream(of: Void.self)
        let (firstHeld, firstIsHeld) = AsyncStream.makeStream(of: Void.self)
        // The first piece: held by a missing table until the test lets it succeed.
        let first = Task {
            var tries = 0
            return try await retry.run(metadata: ["work": "a"]) { () async -> PersistentRetry.Attempt<Int> in
                tries += 1
                if tries == 1 {
                    firstIsHeld.yield()
                    return .permanent(cause: "42P01", Failure())
                }
                for await _ in firstMayGo { break }
                return .succeeded(1)
            }
        }
        for await _ in firstHeld { break }
        // The second piece: held by the same cause twice, then by a transient failure, then done.
        var attempts = 0
        let second: Int = try await retry.run(metadata: ["work": "b"]) { () async -> PersistentRetry.Attempt<Int> in
            attempts += 1
            switch attempts {
            case 1, 2: return .permanent(cause: "42P01", Failure())
            case 3:
                #expect(retry.blockingCauses == ["42P01"])
                return .transient(Failure())
            default: return .succeeded(2)
            }
        }
        #expect(retry.blockingCauses == ["42P01"], "the first piece still holds it")
        letFirstGo.yield()
        letFirstGo.finish()
        #expect(try await first.value == 1)
        #expect(second == 2)
        #expect(retry.blockingCauses.isEmpty)
        let events = reported.events.withLock { $0 }
        #expect(events.filter { $0.hasPrefix("held") }.count == 2, "\(events)")
        #expect(events.filter { $0.contains("first=true") }.count == 1, "\(events)")
        #expect(events.filter { $0 == "released 42P01" }.count == 1, "\(events)")
        #expect(events.last == "released 42P01", "\(events)")
        #expect(events.contains("transient 3 b"), "the failure count goes on across kinds: \(events)")
    }

    @Test func anAttemptThatChangedWhatToTryIsTriedAgainAtOnceAndCancellationEndsTheRetries() async throws {
        let retry = Self.engine(Reported())
        var attempts = 0
        let value: String = try await retry.run { () async -> PersistentRetry.Attempt<String> in
            attempts += 1
            return attempts == 1 ? .again : .succeeded("sent")
        }
        #expect(value == "sent" && attempts == 2)

        let task = Task {
            try await retry.run { () async -> PersistentRetry.Attempt<Int> in .permanent(cause: "TOPIC_AUTHORIZATION_FAILED", Failure()) }
        }
        try await Task.sleep(for: .milliseconds(50))
        #expect(retry.blockingCauses == ["TOPIC_AUTHORIZATION_FAILED"])
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(retry.blockingCauses.isEmpty, "a cancelled piece of work holds nothing")
    }
}
