import PushStores
import PushPipelineTesting
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
/// result text, ticket: the ticket's message index).
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

    func receive(_ batch: [(standing: RecordedDelivery, ticket: EventProcessor.DeliveryTicket)]) async {
        try? await Task.sleep(for: hold)
        batches.withLock {
            $0.append(batch.map { ($0.standing.event.eventID, LedgerWriterTests.text(of: $0.standing), $0.ticket.message) })
        }
    }
}

/// The ledger writer: the state machine's queue of answered outcomes (``OutcomeQueue``, one
/// decision per step) and the coordinator's loop that writes its batches.
@Suite(.timeLimit(.minutes(1)))
struct LedgerWriterTests {
    typealias Machine = DeliveryCoordinator.StateMachine<Int, String>

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

    /// An answered outcome of `event` whose ticket is message `ticket` of one batch.
    static func pending(_ event: String, ticket: Int) throws -> PendingOutcome {
        let batch = PollBatch(id: 1, messages: [], lane: InputLane(priority: .urgent, source: InMemoryMessageSource()), consumedAt: .now, traces: nil)
        let notification = try NotificationEvent(json: Array(#"{"id":"\#(event)","user_ids":["u"],"webpush":{"app":"a","message":"m"}}"#.utf8))
        return PendingOutcome(delivery: outcome(event), mark: nil, ticket: EventProcessor.DeliveryTicket(batch, ticket, notification))
    }

    /// Polls until `condition` holds (the test's time limit bounds it).
    static func waitUntil(_ condition: () -> Bool) async throws {
        while !condition() { try await Task.sleep(for: .milliseconds(1)) }
    }

    // MARK: The queue, one step at a time

    @Test func outcomesAnsweredDuringAWriteGoTogetherInTheNextAndTheWriteEndsTheirClaims() {
        var machine = Machine(permitLimit: 4, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 100)
        #expect(machine.claim(7) == .claimed)
        let waits = machine.outcomes.waitForOutcomes(1)
        #expect(waits, "an idle writer waits")
        let first = machine.outcomes.answered("e1", urgent: true)
        #expect(first.accepted && first.wake == 1, "the first answer wakes the writer")
        #expect(machine.outcomes.nextBatch() == ["e1"])
        for event in ["e2", "e3", "e4"] {
            #expect(machine.outcomes.answered(event, urgent: true) == (true, nil), "the writer is busy: nobody to wake")
        }
        #expect(machine.outcomes.unrecordedCount == 4)
        let copyWaits = machine.waitForClaim(7, id: 1, 2)
        #expect(copyWaits)
        let written = machine.written(claims: [7])
        #expect(written.resume == [2], "the copy waiting for the claim is woken")
        #expect(written.next == ["e2", "e3", "e4"])
        #expect(machine.outcomes.unrecordedCount == 3)
        #expect(machine.written(claims: []).next.isEmpty)
        #expect(machine.outcomes.unrecordedCount == 0)
        #expect(machine.heldInFlight.isEmpty)
    }

    @Test func urgentOutcomesGoIntoTheNextWriteAheadOfAQueuedCampaignAtMostTheBatchSizeOldestFirst() {
        var machine = Machine(permitLimit: 4, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 2)
        _ = machine.outcomes.answered("b0", urgent: false)
        #expect(machine.outcomes.nextBatch() == ["b0"])
        for index in 1..<5 { _ = machine.outcomes.answered("b\(index)", urgent: false) }
        _ = machine.outcomes.answered("u5", urgent: true)
        var writes: [[String]] = []
        var next = machine.written(claims: []).next
        while !next.isEmpty {
            writes.append(next)
            next = machine.written(claims: []).next
        }
        #expect(writes == [["u5", "b1"], ["b2", "b3"], ["b4"]])
    }

    @Test func aStoppedWriterRefusesOutcomesAndHoldsNothing() {
        var machine = Machine(permitLimit: 4, bulkShare: 1, recentCapacity: 10, outcomesPerWrite: 2)
        _ = machine.outcomes.answered("e1", urgent: true)
        _ = machine.outcomes.answered("e2", urgent: false)
        #expect(machine.heldInFlight == ["unrecorded outcomes": 2])
        machine.outcomes.stop()
        #expect(machine.outcomes.answered("e3", urgent: true) == (false, nil))
        #expect(machine.outcomes.nextBatch().isEmpty)
        let waits = machine.outcomes.waitForOutcomes(1)
        #expect(!waits, "a stopped writer does not wait")
        #expect(machine.heldInFlight.isEmpty)
    }

    // MARK: The coordinator's writer loop

    /// Runs `coordinator`'s writer over `ledger`, handing written batches to `handedOn`.
    static func runWriter(_ coordinator: DeliveryCoordinator, _ ledger: HeldLedgerWrites, _ handedOn: HandedOn) -> Task<Void, Never> {
        Task {
            await coordinator.recordOutcomes { batch throws(CancellationError) in
                try await ledger.write(batch.map { ($0.delivery, $0.mark) })
            } then: {
                await handedOn.receive($0)
            }
        }
    }

    @Test func outcomesAnsweredDuringAWriteAreWrittenNextAndEachIsHandedOnWithTheOneThatStands() async throws {
        let ledger = HeldLedgerWrites(recordedBefore: [Self.outcome("e3", status: "recorded by another copy")])
        let handedOn = HandedOn()
        let coordinator = DeliveryCoordinator(permitLimit: 4, outcomesPerWrite: 100)
        let running = Self.runWriter(coordinator, ledger, handedOn)
        #expect(coordinator.answered(try Self.pending("e1", ticket: 1), urgent: true))
        try await Self.waitUntil { ledger.written.count == 1 }
        for (index, event) in ["e2", "e3", "e4"].enumerated() {
            #expect(coordinator.answered(try Self.pending(event, ticket: index + 2), urgent: true))
        }
        #expect(coordinator.unrecordedOutcomes == 4)
        try await Task.sleep(for: .milliseconds(20))
        #expect(ledger.written.count == 1, "no second write while the first is in flight")

        ledger.release(2)
        try await Self.waitUntil { handedOn.received.count == 2 }
        #expect(ledger.written.map { $0.map(\.event.eventID) } == [["e1"], ["e2", "e3", "e4"]])
        #expect(coordinator.unrecordedOutcomes == 0)
        let received = handedOn.received.map { $0.map { "\($0.ticket):\($0.event):\($0.result)" } }
        #expect(received == [["1:e1:delivered"], ["2:e2:delivered", "3:e3:recorded by another copy", "4:e4:delivered"]])
        running.cancel()
        await running.value
    }

    @Test func theNextWriteStartsWhileTheLastBatchIsStillHandedOn() async throws {
        let ledger = HeldLedgerWrites()
        let handedOn = HandedOn(hold: .seconds(30))
        let coordinator = DeliveryCoordinator(permitLimit: 4)
        let running = Self.runWriter(coordinator, ledger, handedOn)
        ledger.release(100)
        coordinator.answered(try Self.pending("e1", ticket: 1), urgent: true)
        try await Self.waitUntil { ledger.written.count == 1 && coordinator.unrecordedOutcomes == 0 }
        coordinator.answered(try Self.pending("e2", ticket: 2), urgent: true)
        try await Self.waitUntil { ledger.written.count == 2 }
        #expect(handedOn.received.isEmpty, "the first batch is still being handed on")
        running.cancel()
        await running.value
    }

    @Test func cancellingTheWriterStopsTheWriteInFlightAndRefusesNewOutcomes() async throws {
        let ledger = HeldLedgerWrites()
        let handedOn = HandedOn()
        let coordinator = DeliveryCoordinator(permitLimit: 4)
        let running = Self.runWriter(coordinator, ledger, handedOn)
        coordinator.answered(try Self.pending("e1", ticket: 1), urgent: true)
        try await Self.waitUntil { ledger.written.count == 1 }
        coordinator.answered(try Self.pending("e2", ticket: 2), urgent: true)

        running.cancel()
        await running.value
        #expect(!coordinator.answered(try Self.pending("e3", ticket: 3), urgent: true))
        #expect(ledger.written.count == 1, "the write in flight was cancelled, nothing else written")
        #expect(handedOn.received.isEmpty)
        #expect(coordinator.unrecordedOutcomes == 0)
    }

    @Test func aWriterWaitingForWorkStopsWhenCancelled() async throws {
        let coordinator = DeliveryCoordinator(permitLimit: 4)
        let running = Self.runWriter(coordinator, HeldLedgerWrites(), HandedOn())
        try await Task.sleep(for: .milliseconds(20))
        running.cancel()
        await running.value
        #expect(!coordinator.answered(try Self.pending("e1", ticket: 1), urgent: true))
    }
}
