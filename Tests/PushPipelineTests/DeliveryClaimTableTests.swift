@testable import PushPipeline
import PushStores
import Testing

struct DeliveryClaimTableTests {
    let first = DeliveryClaimTable<String>.key(eventID: "e1", target: LedgerTarget(.apnsDevice, "aa"))
    let second = DeliveryClaimTable<String>.key(eventID: "e1", target: LedgerTarget(.apnsDevice, "bb"))

    @Test func aClaimIsExclusiveUntilSettledAndThenPointsToTheLedger() {
        var deliveries = DeliveryClaimTable<String>(recentCapacity: 10)
        #expect(deliveries.claim(first) == .claimed)
        #expect(deliveries.claim(first) == .busy, "another copy is sending it")
        #expect(deliveries.claim(second) == .claimed, "another token is another delivery")
        _ = deliveries.settle(first)
        #expect(deliveries.claim(first) == .recordedLately)
        #expect(deliveries.claimSending(first) == .claimed, "when the ledger has no outcome, it may be sent")
        #expect(deliveries.claimSending(first) == .busy)
    }

    @Test func aReleasedClaimWakesItsWaitersAndIsNotRememberedAsRecorded() {
        var deliveries = DeliveryClaimTable<String>(recentCapacity: 10)
        #expect(deliveries.claim(first) == .claimed)
        let registered = deliveries.wait(for: first, id: 1, "copy")
        #expect(registered)
        #expect(deliveries.release(first) == ["copy"])
        #expect(deliveries.claim(first) == .claimed, "nothing was recorded: the copy may send")
    }

    @Test func onlyTheLastRecordedDeliveriesAreRemembered() {
        var deliveries = DeliveryClaimTable<String>(recentCapacity: 2)
        let keys = (0..<3).map { DeliveryClaimTable<String>.key(eventID: "e\($0)", target: LedgerTarget(.apnsDevice, "aa")) }
        for key in keys {
            #expect(deliveries.claim(key) == .claimed)
            _ = deliveries.settle(key)
        }
        #expect(deliveries.claim(keys[0]) == .claimed, "the oldest was forgotten")
        #expect(deliveries.claim(keys[1]) == .recordedLately)
        #expect(deliveries.claim(keys[2]) == .recordedLately)
    }

    @Test func theKeyTellsEventAndTokenApart() {
        func key(_ eventID: String, _ token: String) -> Int { DeliveryClaimTable<String>.key(eventID: eventID, target: LedgerTarget(.apnsDevice, token)) }
        #expect(key("e1", "aa") == key("e1", "aa"))
        #expect(key("e1a", "a") != key("e1", "aa"))
    }

    /// An iPhone and an Android phone whose tokens have one text are two deliveries: neither
    /// waits for the other's claim.
    @Test func theKeyTellsAniPhoneFromAnAndroidPhoneWithTheSameTokenText() {
        var deliveries = DeliveryClaimTable<String>(recentCapacity: 10)
        let token = String(repeating: "ab", count: 32)
        #expect(deliveries.claim(DeliveryClaimTable<String>.key(eventID: "e1", target: LedgerTarget(.apnsDevice, token))) == .claimed)
        #expect(deliveries.claim(DeliveryClaimTable<String>.key(eventID: "e1", target: LedgerTarget(.fcmDevice, token))) == .claimed)
    }

    @Test func aCopyWaitsForTheClaimAndIsReturnedWhenItIsSettled() {
        var deliveries = DeliveryClaimTable<String>(recentCapacity: 10)
        let registeredBeforeAClaim = deliveries.wait(for: first, id: 1, "early")
        #expect(!registeredBeforeAClaim, "nothing to wait for: claim now")
        #expect(deliveries.claim(first) == .claimed)
        let registeredA = deliveries.wait(for: first, id: 2, "copy A")
        #expect(registeredA)
        let registeredB = deliveries.wait(for: first, id: 3, "copy B")
        #expect(registeredB)
        let cancelledB = deliveries.cancelWait(for: first, id: 3)
        #expect(cancelledB == "copy B")
        #expect(deliveries.settle(first) == ["copy A"])
        #expect(deliveries.settle(first).isEmpty, "each waiter is returned once")
    }

    @Test func aWaitCancelledBeforeItIsRegisteredIsRefused() {
        var deliveries = DeliveryClaimTable<String>(recentCapacity: 10)
        #expect(deliveries.claim(first) == .claimed)
        let cancelledEarly = deliveries.cancelWait(for: first, id: 7)
        #expect(cancelledEarly == nil)
        let registeredLate = deliveries.wait(for: first, id: 7, "late")
        #expect(!registeredLate, "the cancellation came first")
        let registeredOther = deliveries.wait(for: first, id: 8, "other")
        #expect(registeredOther)
        #expect(deliveries.settle(first) == ["other"])
    }
}
