import APNSCore
import PushCore
import NIOCore
import NIOEmbedded
import Testing

@testable import APNSHTTP2
@testable import APNSWire
@testable import HTTP2Transport

@Suite("Connection pool state machine")
struct ConnectionPoolStateMachineTests {
    struct FakeConnection: HTTP2PooledConnection, Equatable {
        var id: Int
        var endpoint: APNSEnvironment
    }

    typealias Machine = HTTP2ConnectionPoolStateMachine<FakeConnection, String>

    /// The deadline every waiter gets unless a test says otherwise.
    private static let later = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    private func waiter(_ id: UInt64, deadline: NIODeadline = later, precedence: StreamPrecedence = .urgent) -> Machine.Waiter {
        Machine.Waiter(id: id, recipient: "waiter-\(id)", deadline: deadline, precedence: precedence)
    }

    private func queuedPlan(_ result: Machine.EnqueueResult) -> HTTP2ConnectionPlan<APNSEnvironment>?? {
        if case .queued(let actions) = result { return .some(actions.open) }
        return nil
    }

    private func queuedActions(_ result: Machine.EnqueueResult) -> Machine.Actions? {
        if case .queued(let actions) = result { return actions }
        return nil
    }

    private func leased(_ actions: Machine.Actions) -> [String] {
        actions.leases.map(\.waiter.recipient)
    }

    @Test func opensConnectionsLazilyUpToTheLimit() throws {
        var machine = Machine(connectionsPerEndpoint: 2, maximumWaiters: 100, requiresVerification: true, peerName: "APNs")
        guard case .mustWait = machine.leaseIfAvailable(.production) else {
            Issue.record("expected to wait")
            return
        }
        let first = try #require(queuedPlan(machine.enqueue(waiter(1), for: .production)))
        #expect(first == HTTP2ConnectionPlan<APNSEnvironment>(connectionID: 1, endpoint: .production, delay: .zero))
        let second = try #require(queuedPlan(machine.enqueue(waiter(2), for: .production)))
        #expect(second?.connectionID == 2)
        let third = try #require(queuedPlan(machine.enqueue(waiter(3), for: .production)))
        #expect(third == nil)
        // The other environment has its own pool.
        let sandbox = try #require(queuedPlan(machine.enqueue(waiter(4), for: .sandbox)))
        #expect(sandbox?.endpoint == .sandbox)
    }

    @Test func oneStreamUntilTheFirstSuccessThenTheServerLimit() throws {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: true, peerName: "APNs")
        for id in 1...12 { _ = machine.enqueue(waiter(UInt64(id)), for: .production) }
        let connection = FakeConnection(id: 1, endpoint: .production)
        let ready = machine.connectionReady(connection, streamLimit: 10)
        #expect(leased(ready) == ["waiter-1"])

        // A non-200 answer does not unlock the connection.
        let afterError = machine.release(connectionID: 1, endpoint: .production, status: 403)
        #expect(leased(afterError) == ["waiter-2"])

        let afterSuccess = machine.release(connectionID: 1, endpoint: .production, status: 200)
        #expect(leased(afterSuccess) == (3...12).map { "waiter-\($0)" })
        #expect(afterSuccess.leases.allSatisfy { $0.connection == connection })
    }

    /// Finding 4: when APNs grants fewer streams than Herald has permits, a campaign's requests
    /// queue for streams; urgent requests queued after them are served first, in their order.
    @Test func urgentWaitersGoAheadOfBulkOnes() {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        let connection = FakeConnection(id: 1, endpoint: .production)
        _ = machine.enqueue(waiter(1, precedence: .bulk), for: .production)
        _ = machine.connectionReady(connection, streamLimit: 1)
        for id in 2...4 { _ = machine.enqueue(waiter(UInt64(id), precedence: .bulk), for: .production) }
        _ = machine.enqueue(waiter(5), for: .production)
        _ = machine.enqueue(waiter(6, precedence: .bulk), for: .production)
        _ = machine.enqueue(waiter(7), for: .production)
        var served: [String] = []
        for _ in 0..<6 { served += leased(machine.release(connectionID: 1, endpoint: .production, status: 200)) }
        #expect(served == ["waiter-5", "waiter-7", "waiter-2", "waiter-3", "waiter-4", "waiter-6"])
    }

    /// Finding 10: one endpoint or credential that failed to connect (the sandbox host, say)
    /// does not make Herald unready while another connection works, and a failure nothing has
    /// retried since (no demand) is forgotten after a minute instead of holding readiness.
    @Test func oneFailedEndpointDoesNotMakeHeraldUnreachableAndFailuresAreForgotten() {
        let failedAt = NIODeadline.uptimeNanoseconds(10_000_000_000)
        let failed = HTTP2EndpointReachability(hasReadyConnection: false, lastConnectFailure: failedAt)
        let ready = HTTP2EndpointReachability(hasReadyConnection: true, lastConnectFailure: nil)
        let unused = HTTP2EndpointReachability(hasReadyConnection: false, lastConnectFailure: nil)
        #expect(HTTP2EndpointReachability.isReachable([ready, failed], now: failedAt + .seconds(1)))
        #expect(!HTTP2EndpointReachability.isReachable([unused, failed], now: failedAt + .seconds(1)))
        #expect(HTTP2EndpointReachability.isReachable([unused, failed], now: failedAt + .seconds(61)))
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .sandbox)
        _ = machine.connectionClosed(connectionID: 1, endpoint: .sandbox, failure: .connectionFailed("refused"), now: failedAt)
        #expect(machine.reachability(.sandbox) == failed)
        #expect(machine.reachability(.production) == unused)
    }

    @Test func certificateConnectionsUseTheServerLimitAtOnce() {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        for id in 1...5 { _ = machine.enqueue(waiter(UInt64(id)), for: .production) }
        let ready = machine.connectionReady(FakeConnection(id: 1, endpoint: .production), streamLimit: 3)
        #expect(leased(ready) == ["waiter-1", "waiter-2", "waiter-3"])
        guard case .mustWait = machine.leaseIfAvailable(.production) else {
            Issue.record("the connection is full and others wait")
            return
        }
    }

    @Test func fastPathLeasesTheLeastBusyConnection() {
        var machine = Machine(connectionsPerEndpoint: 2, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .production)
        _ = machine.enqueue(waiter(2), for: .production)
        let a = FakeConnection(id: 1, endpoint: .production)
        let b = FakeConnection(id: 2, endpoint: .production)
        _ = machine.connectionReady(a, streamLimit: 4)
        _ = machine.connectionReady(b, streamLimit: 4)
        var counts: [Int: Int] = [:]
        for _ in 0..<6 {
            guard case .leased(let connection) = machine.leaseIfAvailable(.production) else {
                Issue.record("expected a lease")
                return
            }
            counts[connection.id, default: 0] += 1
        }
        // Two streams were already taken by the waiters; eight in all, four per connection.
        #expect(counts[1, default: 0] + counts[2, default: 0] == 6)
        guard case .mustWait = machine.leaseIfAvailable(.production) else {
            Issue.record("both connections are full")
            return
        }
    }

    /// Two ready production connections, `a` (ID 1) and `b` (ID 2), with these stream limits;
    /// two waiters queued before took a stream each on `a`.
    private func twoReadyConnections(limits: (a: Int, b: Int)) -> (Machine, a: FakeConnection, b: FakeConnection) {
        var machine = Machine(connectionsPerEndpoint: 2, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .production)
        _ = machine.enqueue(waiter(2), for: .production)
        let a = FakeConnection(id: 1, endpoint: .production)
        let b = FakeConnection(id: 2, endpoint: .production)
        _ = machine.connectionReady(a, streamLimit: limits.a)
        _ = machine.connectionReady(b, streamLimit: limits.b)
        return (machine, a, b)
    }

    @Test func aSmallBatchSharesOneConnectionALargeOneIsSplitEvenly() {
        var (machine, a, b) = twoReadyConnections(limits: (a: 12, b: 12))  // 10 free on a, 12 on b
        // A small batch stays on one connection, the one with the most free streams.
        #expect(machine.leaseFreeStreams(.production, upTo: 4) == Array(repeating: b, count: 4))
        // A large one is split evenly: 10 free on a, 8 on b.
        #expect(machine.leaseFreeStreams(.production, upTo: 16) == Array(repeating: a, count: 8) + Array(repeating: b, count: 8))
        // 2 free on a, none on b: two, short of the 6 asked for.
        #expect(machine.leaseFreeStreams(.production, upTo: 6) == [a, a])
        #expect(machine.leaseFreeStreams(.production, upTo: 1).isEmpty)

        // While a request waits in the queue, a batch takes nothing: the queue goes first.
        guard case .queued = machine.enqueue(waiter(3), for: .production) else {
            Issue.record("expected waiter 3 to queue")
            return
        }
        #expect(leased(machine.release(connectionID: 1, endpoint: .production, status: 200)) == ["waiter-3"])
        _ = machine.release(connectionID: 1, endpoint: .production, status: 200)
        #expect(machine.leaseFreeStreams(.production, upTo: 3) == [a])
        _ = machine.shutDown()
        _ = machine.release(connectionID: 2, endpoint: .production, status: 200)
        #expect(machine.leaseFreeStreams(.production, upTo: 3).isEmpty, "nothing after shutdown")
    }

    /// A small batch goes to the connection on the caller's event loop when it has room for
    /// all of it, even with fewer free streams than another; a larger batch, or one the local
    /// connection cannot hold, is placed as without a preference.
    @Test func aSmallBatchPrefersTheConnectionOnTheCallersLoop() {
        var (machine, a, b) = twoReadyConnections(limits: (a: 12, b: 20))  // 10 free on a, 20 on b
        let onA: (FakeConnection) -> Bool = { $0 == a }
        #expect(machine.leaseFreeStreams(.production, upTo: 4, preferring: onA) == Array(repeating: a, count: 4))  // 6 free on a
        #expect(machine.leaseFreeStreams(.production, upTo: 6, preferring: onA) == Array(repeating: a, count: 6))  // none on a
        #expect(machine.leaseFreeStreams(.production, upTo: 3, preferring: onA) == Array(repeating: b, count: 3), "a is full")
        _ = machine.release(connectionID: 1, endpoint: .production, status: 200)
        _ = machine.release(connectionID: 1, endpoint: .production, status: 200)  // 2 free on a, 17 on b
        #expect(machine.leaseFreeStreams(.production, upTo: 3, preferring: onA) == Array(repeating: b, count: 3), "a has room for 2 of 3")
        #expect(
            machine.leaseFreeStreams(.production, upTo: 12, preferring: onA) == Array(repeating: b, count: 12),
            "above a small batch the preference does not apply: the most free first")
        // A large batch is split as without a preference, even where the local connection has room.
        (machine, _, _) = twoReadyConnections(limits: (a: 12, b: 20))  // 10 free on a, 20 on b
        var unpreferring = machine
        #expect(machine.leaseFreeStreams(.production, upTo: 16, preferring: onA) == unpreferring.leaseFreeStreams(.production, upTo: 16))
        #expect(machine.leaseFreeStreams(.production, upTo: 1, preferring: onA) == [a], "then a small one stays local")
    }

    @Test func limitChangesApply() {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        for id in 1...4 { _ = machine.enqueue(waiter(UInt64(id)), for: .production) }
        #expect(
            leased(machine.connectionReady(FakeConnection(id: 1, endpoint: .production), streamLimit: 1)) == [
                "waiter-1"
            ]
        )
        let raised = machine.streamLimitChanged(connectionID: 1, endpoint: .production, limit: 3)
        #expect(leased(raised) == ["waiter-2", "waiter-3"])
    }

    @Test func queueIsBounded() {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 2, requiresVerification: true, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .production)
        _ = machine.enqueue(waiter(2), for: .production)
        guard case .failed(let error) = machine.enqueue(waiter(3), for: .production) else {
            Issue.record("expected the queue to be full")
            return
        }
        #expect(error.description.hasPrefix("overloaded"))
    }

    @Test func failedConnectFailsWaitersAndBacksOff() throws {
        var machine = Machine(connectionsPerEndpoint: 2, maximumWaiters: 100, requiresVerification: true, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .production)
        _ = machine.enqueue(waiter(2), for: .production)
        // First of two attempts fails: the other is still connecting, the waiters stay.
        let firstFailure = machine.connectionClosed(connectionID: 1, endpoint: .production, failure: .connectionFailed("refused"))
        #expect(firstFailure.failures.isEmpty)
        #expect(firstFailure.open == nil)  // after a failure only one attempt runs at a time
        // The second fails too: nothing can serve the queue, so it is failed.
        let secondFailure = machine.connectionClosed(connectionID: 2, endpoint: .production, failure: .connectionFailed("refused"))
        #expect(secondFailure.failures.map(\.waiter.recipient) == ["waiter-1", "waiter-2"])
        #expect(secondFailure.failures.allSatisfy { $0.error.description.contains("refused") })
        // The next request reconnects after a backoff.
        let plan = try #require(queuedPlan(machine.enqueue(waiter(3), for: .production)))
        #expect(plan?.delay == Machine.backoff(afterFailures: 2))
        #expect(plan?.delay == .milliseconds(200))
    }

    @Test func backoffGrowsAndIsCapped() {
        #expect(Machine.backoff(afterFailures: 0) == .zero)
        #expect(Machine.backoff(afterFailures: 1) == .milliseconds(100))
        #expect(Machine.backoff(afterFailures: 4) == .milliseconds(800))
        #expect(Machine.backoff(afterFailures: 40) == .seconds(30))
    }

    @Test func anAnswerResetsTheBackoff() throws {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .production)
        _ = machine.connectionClosed(connectionID: 1, endpoint: .production, failure: .connectionFailed("refused"))
        let retry = try #require(queuedPlan(machine.enqueue(waiter(2), for: .production)))
        #expect(retry?.delay == .milliseconds(100))
        let connection = FakeConnection(id: retry!.connectionID, endpoint: .production)
        #expect(leased(machine.connectionReady(connection, streamLimit: 5)) == ["waiter-2"])
        _ = machine.release(connectionID: connection.id, endpoint: .production, status: 500)
        _ = machine.connectionClosed(connectionID: connection.id, endpoint: .production, failure: nil)
        let next = try #require(queuedPlan(machine.enqueue(waiter(3), for: .production)))
        #expect(next?.delay == .zero)
    }

    @Test func goAwayDrainsAndOpensAReplacement() throws {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .production)
        let old = FakeConnection(id: 1, endpoint: .production)
        _ = machine.connectionReady(old, streamLimit: 10)
        _ = machine.release(connectionID: 1, endpoint: .production, status: 200)
        guard case .leased = machine.leaseIfAvailable(.production) else {
            Issue.record("expected a lease")
            return
        }
        let goAway = machine.connectionGoingAway(connectionID: 1, endpoint: .production)
        let replacement = try #require(goAway.open)
        #expect(replacement.connectionID == 2)
        #expect(replacement.delay == .zero)
        // The draining connection takes no new streams.
        guard case .mustWait = machine.leaseIfAvailable(.production) else {
            Issue.record("a draining connection must not be leased")
            return
        }
        _ = machine.enqueue(waiter(2), for: .production)
        let fresh = FakeConnection(id: 2, endpoint: .production)
        #expect(leased(machine.connectionReady(fresh, streamLimit: 10)) == ["waiter-2"])
        // Releasing the old connection's stream after it closed is harmless.
        _ = machine.connectionClosed(connectionID: 1, endpoint: .production, failure: nil)
        #expect(leased(machine.release(connectionID: 1, endpoint: .production, status: 200)).isEmpty)
    }

    @Test func waitersCanBeRemovedAndTimersAttachedOnlyWhileQueued() {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .production)
        _ = machine.enqueue(waiter(2), for: .production)
        #expect(machine.removeWaiter(1, for: .production)?.recipient == "waiter-1")
        #expect(machine.removeWaiter(1, for: .production) == nil)
        #expect(
            leased(machine.connectionReady(FakeConnection(id: 1, endpoint: .production), streamLimit: 5)) == [
                "waiter-2"
            ]
        )
        #expect(machine.removeWaiter(2, for: .production) == nil)
    }

    @Test func oneWaiterTimerArmedForTheEarliestDeadline() throws {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        let t = { (seconds: Int64) in NIODeadline.uptimeNanoseconds(UInt64(seconds) * 1_000_000_000) }
        let first = try #require(queuedActions(machine.enqueue(waiter(1, deadline: t(10)), for: .production)))
        #expect(first.armWaiterTimer == t(10))
        // Later deadlines need no timer work.
        let second = try #require(queuedActions(machine.enqueue(waiter(2, deadline: t(20)), for: .production)))
        #expect(second.armWaiterTimer == nil)
        // The timer is attached once scheduled; an earlier deadline replaces (and cancels) it.
        let loop = EmbeddedEventLoop()
        let scheduled = loop.scheduleTask(deadline: t(10)) {}
        let attached = machine.attachWaiterTimer(scheduled, deadline: t(10))
        #expect(attached)
        let third = try #require(queuedActions(machine.enqueue(waiter(3, deadline: t(5)), for: .sandbox)))
        #expect(third.armWaiterTimer == t(5))
        #expect(third.cancelWaiterTimer != nil)
        // A stale timer is neither attached nor acted on.
        let attachedStale = machine.attachWaiterTimer(scheduled, deadline: t(10))
        #expect(!attachedStale)
        let staleFiring = machine.waiterTimerFired(timerDeadline: t(10), now: t(10))
        #expect(staleFiring.failures.isEmpty)

        // At 12 s the 5 s and 10 s waiters expire (both environments); the timer re-arms for 20 s.
        let fired = machine.waiterTimerFired(timerDeadline: t(5), now: t(12))
        #expect(fired.failures.map(\.waiter.recipient).sorted() == ["waiter-1", "waiter-3"])
        #expect(fired.failures.allSatisfy { $0.error.isDeadlineExceeded })
        #expect(fired.armWaiterTimer == t(20))
        #expect(
            leased(machine.connectionReady(FakeConnection(id: 1, endpoint: .production), streamLimit: 5)) == [
                "waiter-2"
            ]
        )
    }

    @Test func shutdownFailsWaitersAndRefusesNewRequests() {
        var machine = Machine(connectionsPerEndpoint: 1, maximumWaiters: 100, requiresVerification: false, peerName: "APNs")
        _ = machine.enqueue(waiter(1), for: .production)
        let connection = FakeConnection(id: 1, endpoint: .production)
        _ = machine.enqueue(waiter(2), for: .sandbox)
        let (waiters, connections, _) = machine.shutDown()
        #expect(Set(waiters.map(\.recipient)) == ["waiter-1", "waiter-2"])
        #expect(connections.isEmpty)
        guard case .failed(let error) = machine.leaseIfAvailable(.production) else {
            Issue.record("expected shuttingDown")
            return
        }
        #expect(error == .shuttingDown("APNs client is shutting down"))
        // A connection finishing its handshake after shutdown is closed at once.
        #expect(machine.connectionReady(connection, streamLimit: 10).close == [connection])
    }
}
