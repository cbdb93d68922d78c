import PushStores
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
        stored = Mutex(Dictionary(uniqueKeysWithValues: recordedBefore.map { ($0.event.eventID + "/" + $0.token, $0) }))
    }

    /// The batches written (or being written) so far, oldest first.
    var written: [[RecordedDelivery]] { batches.withLock { $0 } }

    /// Lets the next `count` writes finish.
    func release(_ count: Int = 1) { released.add(count, ordering: .relaxed) }

    func write(_ batch: [(delivery: RecordedDelivery, mark: UnregisterMark?)]) async throws(CancellationError) -> [RecordedDelivery] {
        let number = batches.withLock { batches in
            batches.append(batch.map(\.delivery))
            return batches.count
        }
        while released.load(ordering: .relaxed) < number {
            do { try await Task.sleep(for: .milliseconds(1)) } catch { throw CancellationError() }
        }
        return stored.withLock { stored in
            batch.map { entry in
                let key = entry.delivery.event.eventID + "/" + entry.delivery.token
                if let earlier = stored[key] { return earlier }
                stored[key] = entry.delivery
                return entry.delivery
            }
        }
    }
}

/// What the writer handed on: each written batch as (event ID of the standing outcome, its
/// result text, ticket).
final class HandedOn: Sendable {
    private let batches = Mutex<[[(event: String, result: String, ticket: Int)]]>([])
    /// How long each hand-over takes (it holds the batch like a slow publish).
    private let hold: Duration

    init(hold: Duration = .zero) { self.hold = hold }

    /// The batches handed on so far, ordered by their first ticket: hand-overs run concurrently,
    /// so the order they finish in is not the order they were written in.
    var received: [[(event: String, result: String, ticket: Int)]] {
        batches.withLock { $0 }.sorted { ($0.first?.ticket ?? 0) < ($1.first?.ticket ?? 0) }
    }

    func receive(_ batch: [(standing: RecordedDelivery, ticket: Int)]) async {
        try? await Task.sleep(for: hold)
        batches.withLock { $0.append(batch.map { ($0.standing.event.eventID, LedgerWriterTests.text(of: $0.standing), $0.ticket) }) }
    }
}

@Suite(.timeLimit(.minutes(1)))
struct LedgerWriterTests {
    /// An outcome whose result text is `status`, so the test can tell outcomes apart.
    static func outcome(_ event: String, _ token: String = "t1", status: String = "delivered") -> RecordedDelivery {
        RecordedDelivery(
            event: LedgerEvent(eventID: event, topic: "com.example.shop", day: 20_000),
            target: LedgerTarget(.other, token),
            userID: "u",
            outcome: .message(result: Array(status.utf8), unregisteredEvent: nil)
        )
    }

    /// The result text of an outcome made by ``outcome(_:_:status:)``.
    static func text(of delivery: RecordedDelivery) -> String {
        if case .message(let result, _) = delivery.outcome { String(decoding: result, as: UTF8.self) } else { "" }
    }

    /// Polls until `condition` holds (the test's time limit bounds it).
    static func waitUntil(_ condition: () -> Bool) async throws {
        while !condition() { try await Task.sleep(for: .milliseconds(1)) }
    }

    @Test func outcomesSubmittedDuringAWriteGoTogetherInTheNextAndEachTicketGetsTheOutcomeThatStands() async throws {
        let ledger = HeldLedgerWrites(recordedBefore: [Self.outcome("e3", status: "recorded by another copy")])
        let handedOn = HandedOn()
        let writer = LedgerWriter<Int>(maxBatchSize: 100)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await writer.run(writing: ledger.write, then: handedOn.receive) }
            #expect(writer.submit(Self.outcome("e1"), marking: nil, ticket: 1))
            try await Self.waitUntil { ledger.written.count == 1 }
            for (index, event) in ["e2", "e3", "e4"].enumerated() {
                #expect(writer.submit(Self.outcome(event), marking: nil, ticket: index + 2))
            }
            #expect(writer.unrecordedCount == 4)
            try await Task.sleep(for: .milliseconds(20))
            #expect(ledger.written.count == 1, "no second write while the first is in flight")

            ledger.release(2)
            try await Self.waitUntil { handedOn.received.count == 2 }
            #expect(ledger.written.map { $0.map(\.event.eventID) } == [["e1"], ["e2", "e3", "e4"]])
            #expect(writer.unrecordedCount == 0)
            let received = handedOn.received.map { $0.map { "\($0.ticket):\($0.event):\($0.result)" } }
            #expect(received == [["1:e1:delivered"], ["2:e2:delivered", "3:e3:recorded by another copy", "4:e4:delivered"]])
            group.cancelAll()
        }
    }

    @Test func urgentOutcomesGoIntoTheNextWriteAheadOfAQueuedCampaign() async throws {
        let ledger = HeldLedgerWrites()
        let handedOn = HandedOn()
        let writer = LedgerWriter<Int>(maxBatchSize: 2)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await writer.run(writing: ledger.write, then: handedOn.receive) }
            writer.submit(Self.outcome("b0"), marking: nil, ticket: 0, urgent: false)
            try await Self.waitUntil { ledger.written.count == 1 }
            for index in 1..<5 { writer.submit(Self.outcome("b\(index)"), marking: nil, ticket: index, urgent: false) }
            writer.submit(Self.outcome("u5"), marking: nil, ticket: 5)
            ledger.release(4)
            try await Self.waitUntil { handedOn.received.count == 4 }
            #expect(ledger.written.map { $0.map(\.event.eventID) } == [["b0"], ["u5", "b1"], ["b2", "b3"], ["b4"]])
            group.cancelAll()
        }
    }

    @Test func aWriteTakesAtMostTheBatchSizeOldestFirst() async throws {
        let ledger = HeldLedgerWrites()
        let handedOn = HandedOn()
        let writer = LedgerWriter<Int>(maxBatchSize: 2)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await writer.run(writing: ledger.write, then: handedOn.receive) }
            writer.submit(Self.outcome("e0"), marking: nil, ticket: 0)
            try await Self.waitUntil { ledger.written.count == 1 }
            for index in 1..<5 { writer.submit(Self.outcome("e\(index)"), marking: nil, ticket: index) }
            ledger.release(3)
            try await Self.waitUntil { handedOn.received.count == 3 }
            #expect(ledger.written.map { $0.map(\.event.eventID) } == [["e0"], ["e1", "e2"], ["e3", "e4"]])
            #expect(handedOn.received.map { $0.map(\.ticket) } == [[0], [1, 2], [3, 4]])
            group.cancelAll()
        }
    }

    @Test func theNextWriteStartsWhileTheLastBatchIsStillHandedOn() async throws {
        let ledger = HeldLedgerWrites()
        let handedOn = HandedOn(hold: .seconds(30))
        let writer = LedgerWriter<Int>(maxBatchSize: 100)
        let running = Task { await writer.run(writing: ledger.write, then: handedOn.receive) }
        ledger.release(100)
        writer.submit(Self.outcome("e1"), marking: nil, ticket: 1)
        try await Self.waitUntil { ledger.written.count == 1 && writer.unrecordedCount == 0 }
        writer.submit(Self.outcome("e2"), marking: nil, ticket: 2)
        try await Self.waitUntil { ledger.written.count == 2 }
        #expect(handedOn.received.isEmpty, "the first batch is still being handed on")
        running.cancel()
        await running.value
    }

    @Test func cancellingTheWriterStopsTheWriteInFlightAndRefusesNewOutcomes() async throws {
        let ledger = HeldLedgerWrites()
        let handedOn = HandedOn()
        let writer = LedgerWriter<Int>(maxBatchSize: 100)
        let running = Task { await writer.run(writing: ledger.write, then: handedOn.receive) }
        writer.submit(Self.outcome("e1"), marking: nil, ticket: 1)
        try await Self.waitUntil { ledger.written.count == 1 }
        writer.submit(Self.outcome("e2"), marking: nil, ticket: 2)

        running.cancel()
        await running.value
        #expect(!writer.submit(Self.outcome("e3"), marking: nil, ticket: 3))
        #expect(ledger.written.count == 1, "the write in flight was cancelled, nothing else written")
        #expect(handedOn.received.isEmpty)
        #expect(writer.unrecordedCount == 0)
    }

    @Test func aWriterWaitingForWorkStopsWhenCancelled() async throws {
        let writer = LedgerWriter<Int>(maxBatchSize: 100)
        let running = Task { await writer.run(writing: HeldLedgerWrites().write, then: HandedOn().receive) }
        try await Task.sleep(for: .milliseconds(20))
        running.cancel()
        await running.value
        #expect(!writer.submit(Self.outcome("e1"), marking: nil, ticket: 1))
    }
}
