@testable import PushPipeline
import Testing

/// The send permits' queue on its own (waiters are plain integers); with real tasks in
/// ``DeliveryCoordinatorTests``.
@Suite struct SendPermitQueueTests {
    typealias Machine = SendPermitQueue<Int>

    @Test func grantsUpToTheLimitThenQueues() {
        var machine = Machine(limit: 2)
        let result1 = machine.tryAcquire(.urgent)
        #expect(result1)
        let result2 = machine.tryAcquire(.bulk)
        #expect(result2)
        let result3 = machine.tryAcquire(.urgent)
        #expect(!result3)
        guard case .wait = machine.enqueue(1, id: 1, lane: .urgent) else {
            Issue.record("a full machine granted a permit")
            return
        }
        #expect(machine.inUse == 2)
        let result4 = machine.release(1, from: .urgent)
        #expect(result4 == [1])
        #expect(machine.inUse == 2)
        let result5 = machine.release(1, from: .urgent) + machine.release(1, from: .bulk)
        #expect(result5 == [])
        #expect(machine.inUse == 0)
    }

    /// The lost wake-up: a release between "none free" and the registration of the waiter.
    @Test func aReleaseBetweenNoneFreeAndWaitingWakesTheWaiter() {
        var machine = Machine(limit: 1)
        let result6 = machine.tryAcquire(.urgent)
        #expect(result6)
        let noneFree = !machine.tryAcquire(.urgent)
        #expect(noneFree)  // the sender sees none free...
        let wokenByRelease = machine.release(1, from: .urgent)
        #expect(wokenByRelease == [])  // ...the holder releases before it registers...
        guard case .resume(let waiter) = machine.enqueue(7, id: 1, lane: .urgent) else {
            Issue.record("the waiter was parked although a permit was free")
            return
        }
        #expect(waiter == 7)  // ...and it gets the permit at once.
        #expect(machine.inUse == 1)
    }

    @Test func urgentWaitersAreServedBeforeBulkOnesEachInArrivalOrder() {
        var machine = Machine(limit: 1)
        let result7 = machine.tryAcquire(.bulk)
        #expect(result7)
        for (id, lane) in [(1, Lane.bulk), (2, .urgent), (3, .bulk), (4, .urgent)] {
            guard case .wait = machine.enqueue(id, id: UInt64(id), lane: lane) else {
                Issue.record("granted while full")
                return
            }
        }
        #expect(machine.waiting(.urgent) == 2)
        #expect(machine.waiting(.bulk) == 2)
        let result8 = machine.release(1, from: .bulk)
        #expect(result8 == [2])
        let result9 = machine.release(1, from: .urgent)
        #expect(result9 == [4])
        let result10 = machine.release(1, from: .urgent)
        #expect(result10 == [1])
        let result11 = machine.release(1, from: .bulk)
        #expect(result11 == [3])
        let result12 = machine.release(1, from: .bulk)
        #expect(result12 == [])
        #expect(machine.inUse == 0)
    }

    @Test func aNewSenderDoesNotOvertakeTheWaitersOfItsLane() {
        var machine = Machine(limit: 1)
        let result12 = machine.tryAcquire(.urgent)
        #expect(result12)
        guard case .wait = machine.enqueue(1, id: 1, lane: .bulk) else {
            Issue.record("granted while full")
            return
        }
        // Bulk waits behind bulk; urgent does not wait behind bulk, but no permit is free.
        let result13 = machine.tryAcquire(.bulk)
        #expect(!result13)
        let result14 = machine.tryAcquire(.urgent)
        #expect(!result14)
        let result15 = machine.release(1, from: .urgent)
        #expect(result15 == [1])
    }

    @Test func aCancelledWaiterIsRemovedAndSkipped() {
        var machine = Machine(limit: 1)
        let result16 = machine.tryAcquire(.urgent)
        #expect(result16)
        _ = machine.enqueue(1, id: 1, lane: .urgent)
        _ = machine.enqueue(2, id: 2, lane: .urgent)
        let result17 = machine.cancel(id: 1)
        #expect(result17 == 1)
        let result18 = machine.cancel(id: 1)
        #expect(result18 == nil)
        let result19 = machine.release(1, from: .urgent)
        #expect(result19 == [2])
        let cancelledAfterGrant = machine.cancel(id: 2)
        #expect(cancelledAfterGrant == nil)  // already granted
    }

    /// Random interleavings of acquire, enqueue, cancel and release in both lanes, with and
    /// without a bulk share: permits are never lost or duplicated, bulk senders never hold more
    /// than their share, and nobody waits while a permit is free for them.
    @Test(arguments: 1...20) func randomInterleavingsKeepEveryPermit(seed: UInt64) {
        var random = SplitMix(seed: seed)
        let limit = Int(random.next() % 5) + 1
        var machine = Machine(limit: limit, bulkShare: seed.isMultiple(of: 2) ? 0.5 : 1)
        var holders: [Lane: Int] = [.urgent: 0, .bulk: 0]
        var waiting: [UInt64: Lane] = [:]
        var nextID: UInt64 = 0
        for _ in 0..<2_000 {
            let lane: Lane = random.next() % 3 == 0 ? .bulk : .urgent
            switch random.next() % 4 {
            case 0:
                if machine.tryAcquire(lane) { holders[lane, default: 0] += 1 }
            case 1:
                nextID += 1
                switch machine.enqueue(Int(nextID), id: nextID, lane: lane) {
                case .resume: holders[lane, default: 0] += 1
                case .wait: waiting[nextID] = lane
                }
            case 2:
                // Every sender still waiting can be cancelled, and hands back its own waiter.
                guard let id = waiting.keys.sorted().randomElement(using: &random) else { continue }
                waiting[id] = nil
                let cancelled = machine.cancel(id: id)
                #expect(cancelled == Int(id))
            default:
                let releasing: Lane = holders[.bulk, default: 0] > 0 && (holders[.urgent, default: 0] == 0 || random.next() % 2 == 0) ? .bulk : .urgent
                let held = holders[releasing, default: 0]
                guard held > 0 else { continue }
                let count = Int(random.next() % UInt64(held)) + 1
                holders[releasing] = held - count
                for granted in machine.release(count, from: releasing) {
                    let grantedLane = waiting.removeValue(forKey: UInt64(granted))
                    #expect(grantedLane != nil, "only a waiter is granted")
                    holders[grantedLane ?? .urgent, default: 0] += 1
                }
            }
            let held = holders.values.reduce(0, +)
            #expect(machine.inUse == held)
            #expect(held <= limit)
            #expect(machine.heldByBulk == holders[.bulk] && machine.heldByBulk <= machine.bulkLimit)
            if machine.available > 0 {
                #expect(machine.waiting(.urgent) == 0)
                #expect(machine.waiting(.bulk) == 0 || machine.heldByBulk == machine.bulkLimit)
            }
        }
    }

    @Test func bulkSendersLeaveTheirShareForUrgentOnes() {
        var machine = Machine(limit: 4, bulkShare: 0.5)
        let bulkGrants = (0..<3).map { _ in machine.tryAcquire(.bulk) }
        #expect(bulkGrants == [true, true, false], "two of four permits for bulk")
        guard case .wait = machine.enqueue(1, id: 1, lane: .bulk) else {
            Issue.record("a bulk sender beyond the share waits")
            return
        }
        let urgentGrants = (0..<2).map { _ in machine.tryAcquire(.urgent) }
        #expect(urgentGrants == [true, true], "the rest are free for urgent senders")
        let urgentReturned = machine.release(1, from: .urgent)
        #expect(urgentReturned.isEmpty, "an urgent permit does not raise the bulk share")
        let bulkReturned = machine.release(1, from: .bulk)
        #expect(bulkReturned == [1], "a bulk permit goes to the bulk waiter")
    }
}

private typealias Lane = InputLane.Priority

/// A small deterministic generator, so a failing interleaving can be replayed by its seed.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
