import DeviceTokenStore
import Foundation
@testable import PushPipeline
import Synchronization
import Testing

/// A ledger the test lets write one batch at a time: each write waits until the test releases
/// it (or is cancelled), records the batch, and answers like the real ledger, an outcome
/// recorded earlier standing over a new one.
final class HeldLedgerWrites: Sendable {
    private let batches = Mutex<[[RecordedDelivery]]>([])
    private let released = Atomic(0)
    private let stored: Mutex<[String: RecordedDelivery]>

    init(recordedBefore: [RecordedDelivery] = []) {
        stored = Mutex(Dictionary(uniqueKeysWithValues: recordedBefore.map { ($0.eventID + "/" + $0.token, $0) }))
    }

    /// The batches written (or being written) so far, oldest first.
    var written: [[RecordedDelivery]] { batches.withLock { $0 } }

    /// Lets the next `count` writes finish.
    func release(_ count: Int = 1) { released.add(count, ordering: .relaxed) }

    func write(_ batch: [LedgerWriter.Entry]) async throws(CancellationError) -> [RecordedDelivery] {
        let number = batches.withLock { batches in
            batches.append(batch.map(\.delivery))
            return batches.count
        }
        while released.load(ordering: .relaxed) < number {
            do { try await Task.sleep(for: .milliseconds(1)) } catch { throw CancellationError() }
        }
        return stored.withLock { stored in
            batch.map { entry in
                let key = entry.delivery.eventID + "/" + entry.delivery.token
                if let earlier = stored[key] { return earlier }
                stored[key] = entry.delivery
                return entry.delivery
            }
        }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct LedgerWriterTests {
    static func outcome(_ event: String, _ token: String = "t1", status: String = "delivered") -> RecordedDelivery {
        RecordedDelivery(eventID: event, token: token, topic: "com.example.shop", userID: "u", result: Array(status.utf8))
    }

    /// Polls until `condition` holds (the test's time limit bounds it).
    static func waitUntil(_ condition: () -> Bool) async throws {
        while !condition() { try await Task.sleep(for: .milliseconds(1)) }
    }

    @Test func outcomesArrivingDuringAWriteGoTogetherInTheNextAndEachCallerGetsTheOneThatStands() async throws {
        let earlier = Self.outcome("e3", status: "recorded by another copy")
        let ledger = HeldLedgerWrites(recordedBefore: [earlier])
        let writer = LedgerWriter(maxBatchSize: 100)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await writer.run(writing: ledger.write) }
            let first = Task { try await writer.record(Self.outcome("e1"), marking: nil) }
            try await Self.waitUntil { ledger.written.count == 1 }
            let others = ["e2", "e3", "e4"].map { event in Task { try await writer.record(Self.outcome(event), marking: nil) } }
            try await Self.waitUntil { writer.unrecordedCount == 4 }
            #expect(ledger.written.count == 1, "no second write while the first is in flight")

            ledger.release(2)
            try await Self.waitUntil { writer.unrecordedCount == 0 || ledger.written.count > 2 }
            #expect(ledger.written.map { Set($0.map(\.eventID)) } == [["e1"], ["e2", "e3", "e4"]])
            ledger.release(100)  // whatever else was written, so a failure ends here
            #expect(try await first.value == Self.outcome("e1"))
            #expect(try await others[0].value == Self.outcome("e2"))
            #expect(try await others[1].value == earlier, "recorded earlier: that outcome stands")
            #expect(try await others[2].value == Self.outcome("e4"))
            group.cancelAll()
        }
    }

    @Test func aWriteTakesAtMostTheBatchSizeOldestFirst() async throws {
        let ledger = HeldLedgerWrites()
        let writer = LedgerWriter(maxBatchSize: 2)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await writer.run(writing: ledger.write) }
            var callers: [Task<RecordedDelivery, any Error>] = []
            callers.append(Task { try await writer.record(Self.outcome("e0"), marking: nil) })
            try await Self.waitUntil { ledger.written.count == 1 }
            for index in 1..<5 {
                callers.append(Task { try await writer.record(Self.outcome("e\(index)"), marking: nil) })
                try await Self.waitUntil { writer.unrecordedCount == index + 1 }
            }
            ledger.release(3)
            try await Self.waitUntil { writer.unrecordedCount == 0 || ledger.written.count > 3 }
            #expect(ledger.written.map { $0.map(\.eventID) } == [["e0"], ["e1", "e2"], ["e3", "e4"]])
            ledger.release(100)
            for (index, caller) in callers.enumerated() {
                #expect(try await caller.value == Self.outcome("e\(index)"))
            }
            group.cancelAll()
        }
    }

    @Test func aCancelledCallerStopsWaitingButItsOutcomeIsStillWritten() async throws {
        let ledger = HeldLedgerWrites()
        let writer = LedgerWriter(maxBatchSize: 100)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await writer.run(writing: ledger.write) }
            let first = Task { try await writer.record(Self.outcome("e1"), marking: nil) }
            try await Self.waitUntil { ledger.written.count == 1 }
            let cancelled = Task { try await writer.record(Self.outcome("e2"), marking: nil) }
            try await Self.waitUntil { writer.unrecordedCount == 2 }
            cancelled.cancel()
            await #expect(throws: CancellationError.self) { try await cancelled.value }

            ledger.release(2)
            _ = try await first.value
            try await Self.waitUntil { writer.unrecordedCount == 0 }
            #expect(ledger.written.map { $0.map(\.eventID) } == [["e1"], ["e2"]])
            group.cancelAll()
        }
    }

    @Test func cancellingTheWriterFailsEveryWaitingCallerAndRefusesNewOnes() async throws {
        let ledger = HeldLedgerWrites()
        let writer = LedgerWriter(maxBatchSize: 100)
        let running = Task { await writer.run(writing: ledger.write) }
        let writing = Task { try await writer.record(Self.outcome("e1"), marking: nil) }
        try await Self.waitUntil { ledger.written.count == 1 }
        let queued = Task { try await writer.record(Self.outcome("e2"), marking: nil) }
        try await Self.waitUntil { writer.unrecordedCount == 2 }

        running.cancel()
        await running.value
        await #expect(throws: CancellationError.self) { try await writing.value }
        await #expect(throws: CancellationError.self) { try await queued.value }
        await #expect(throws: CancellationError.self) { try await writer.record(Self.outcome("e3"), marking: nil) }
        #expect(ledger.written.count == 1, "the write in flight was cancelled, nothing else written")
    }

    @Test func aWriterWaitingForWorkStopsWhenCancelled() async throws {
        let writer = LedgerWriter(maxBatchSize: 100)
        let running = Task { await writer.run(writing: HeldLedgerWrites().write) }
        try await Task.sleep(for: .milliseconds(20))
        running.cancel()
        await running.value
        await #expect(throws: CancellationError.self) { try await writer.record(Self.outcome("e1"), marking: nil) }
    }
}
