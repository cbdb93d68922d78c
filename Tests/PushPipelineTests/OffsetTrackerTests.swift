import Dispatch
import Foundation
import KafkaMessages
import Testing

@testable import PushPipeline

@Suite struct OffsetTrackerTests {
    let partition = KafkaTopicPartition(topic: "t", partition: 0)

    @Test func commitsOnlyBelowTheLowestUnfinishedOffset() throws {
        var tracker = OffsetTracker()
        var generations: [Int64: UInt64] = [:]
        for offset in Int64(10)..<15 {
            let started = tracker.start(partition, offset: offset)
            let generation = try #require(started)
            generations[offset] = generation
        }
        tracker.finish(partition, offset: 10, generation: generations[10]!)
        tracker.finish(partition, offset: 12, generation: generations[12]!)
        #expect(tracker.committableOffsets()[partition] == 11)
        tracker.markCommitted([partition: 11])
        #expect(tracker.committableOffsets().isEmpty, "nothing new to commit")
        for offset in Int64(11)..<15 where offset != 12 { tracker.finish(partition, offset: offset, generation: generations[offset]!) }
        #expect(tracker.committableOffsets()[partition] == 15)
        #expect(tracker.inFlightCount == 0)
    }

    @Test func aRevokedPartitionTakesNothingUntilAssignedAgain() {
        var tracker = OffsetTracker()
        let startedWhileOwned = tracker.start(partition, offset: 1)
        let inFlightAtRevocation = tracker.revoke([partition])
        let startedAfterRevocation = tracker.start(partition, offset: 2)
        #expect(startedWhileOwned != nil)
        #expect(inFlightAtRevocation == [partition: 1])
        #expect(startedAfterRevocation == nil)
        #expect(tracker.committableOffsets().isEmpty)
        tracker.assign([partition])
        #expect(tracker.start(partition, offset: 2) != nil)
    }

    /// A partition assigned and not read from has nothing to commit: committing its start would
    /// rewind the group's offset (found by the simulation, seed 3, in this rewrite).
    @Test func aPartitionAssignedAndNotReadFromCommitsNothing() {
        var tracker = OffsetTracker()
        tracker.assign([partition])
        #expect(tracker.committableOffsets().isEmpty)
        #expect(tracker.revoke([partition]).isEmpty)
    }

    /// Finding 1: the fence is the assignment a message started under, not whether the
    /// partition is assigned now.
    @Test func aMessageStartedBeforeARevocationStaysFencedWhenThePartitionComesBack() throws {
        var tracker = OffsetTracker()
        tracker.assign([partition])
        let started = tracker.start(partition, offset: 7)
        let generation = try #require(started)
        #expect(!tracker.isFenced(partition, generation: generation))
        _ = tracker.revoke([partition])
        #expect(tracker.isFenced(partition, generation: generation))
        tracker.assign([partition])
        #expect(tracker.isFenced(partition, generation: generation), "fence lifted when the partition came back")
        // The old message's late finish does not finish the new assignment's copy of it.
        let startedAgain = tracker.start(partition, offset: 7)
        let again = try #require(startedAgain)
        tracker.finish(partition, offset: 7, generation: generation)
        #expect(tracker.inFlightCount == 1)
        #expect(tracker.committableOffsets()[partition] == 7)
        tracker.finish(partition, offset: 7, generation: again)
        #expect(tracker.committableOffsets()[partition] == 8)
    }

    /// A drain fences its partitions' sends at once and starts no message of theirs; a message
    /// given up holds the commit point but not the drain.
    @Test func aDrainFencesAtOnceAndAGivenUpMessageHoldsTheCommitNotTheDrain() throws {
        var tracker = OffsetTracker()
        tracker.assign([partition])
        let startedFirst = tracker.start(partition, offset: 0)
        let startedSecond = tracker.start(partition, offset: 1)
        let first = try #require(startedFirst)
        let second = try #require(startedSecond)
        #expect(tracker.beginDrain([partition]) == 2)
        #expect(tracker.isFenced(partition, generation: first))
        #expect(tracker.start(partition, offset: 2) == nil, "nothing starts while draining")
        #expect(tracker.finish(partition, offset: 1, generation: second) == false, "one left")
        #expect(tracker.giveUp(partition, offset: 0, generation: first) == true, "the drain's last")
        #expect(tracker.inFlightCount(in: [partition]) == 0)
        #expect(tracker.revoke([partition]) == [partition: 0], "the given-up message is read again by the new owner")
    }

    /// Finding 13: the drain sleeps until the message that ends it settles, on the blocking
    /// thread it runs on: over a wait of a second its thread is switched out a handful of times
    /// (a loop that looks again every few milliseconds is switched out hundreds of times), and
    /// it returns at the finish, not at its bound.
    @Test func theDrainSleepsUntilItsLastMessageSettlesNotAtItsBound() async throws {
        let coordinator = DeliveryCoordinator(permitLimit: 1)
        coordinator.assign([partition], lane: .bulk)
        let message = KafkaMessage(topic: "t", partition: 0, offset: 3, key: nil, value: nil)
        let started = try #require(coordinator.start([message], lane: .bulk, polledAtMilliseconds: 0).first)
        let drainStarted = ContinuousClock.now
        let (left, switches) = await withCheckedContinuation { continuation in
            Thread {
                let before = Self.voluntaryContextSwitchesOfThisThread()
                let left = coordinator.drain([self.partition], lane: .bulk, timeout: .seconds(30))
                continuation.resume(returning: (left, Self.voluntaryContextSwitchesOfThisThread() - before))
            }.start()
            DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(1)) { coordinator.finish(started) }
        }
        #expect(left == 0)
        #expect(drainStarted.duration(to: .now) < .seconds(15), "woken by the finish, not by the 30 s bound")
        #expect(switches <= 10, "the drain's thread gave up its core \(switches) times while waiting a second")
    }

    /// How often the calling thread has given up its core so far (`getrusage`'s `ru_nvcsw`).
    static func voluntaryContextSwitchesOfThisThread() -> Int {
        var usage = rusage()
        getrusage(.init(1), &usage)  // RUSAGE_THREAD, a GNU constant Swift's Glibc leaves out
        return usage.ru_nvcsw
    }

    /// Finding 6: a record without a timestamp takes its ledger day from the poll, once.
    @Test func aRecordWithoutATimestampKeepsThePollsTime() {
        let untimed = KafkaMessage(topic: "t", partition: 0, offset: 0, key: nil, value: nil)
        let timed = KafkaMessage(topic: "t", partition: 0, offset: 1, key: nil, value: nil, timestampMilliseconds: 5)
        #expect(StartedMessage(untimed, lane: .urgent, generation: 1, polledAtMilliseconds: 86_400_000 - 1).recordTimestampMilliseconds == 86_399_999)
        #expect(StartedMessage(timed, lane: .urgent, generation: 1, polledAtMilliseconds: 86_400_000).recordTimestampMilliseconds == 5)
    }
}
