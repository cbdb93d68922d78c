package import PushCore
package import NIOCore

/// What the pool needs to know about a connection.
package protocol HTTP2PooledConnection: Sendable {
    /// Which of the client's endpoints the connection goes to (APNs: production or sandbox).
    associatedtype Endpoint: Hashable, Sendable
    var id: Int { get }
    var endpoint: Endpoint { get }
}

/// A connection the pool asks its client to open, after `delay` (exponential backoff after failures).
package struct HTTP2ConnectionPlan<Endpoint: Hashable & Sendable>: Sendable, Hashable {
    package var connectionID: Int
    package var endpoint: Endpoint
    package var delay: Duration
}

/// The endpoint of a client that has one (FCM, one web push origin).
package enum HTTP2SoleEndpoint: Hashable, Sendable {
    case sole
}

/// The connection pool's state: connections per endpoint with their stream budgets, and the
/// callers waiting for a stream (``WaiterQueue``: urgent ones first, then bulk, each in FIFO order). A value type behind a lock; every method returns
/// what the caller must do (resume waiters, open or close connections) outside the lock.
///
/// Generic over the connection and a waiter's recipient (whoever is handed the leased
/// connection: a task's continuation, or a batch's callback), so tests can drive it without
/// sockets, and so the FCM client pools its connections with it too (one endpoint,
/// `.production`).
package struct HTTP2ConnectionPoolStateMachine<Connection: HTTP2PooledConnection, Recipient: Sendable> {
    /// A caller waiting for a stream until its deadline.
    package struct Waiter: Sendable {
        package let id: UInt64
        package let recipient: Recipient
        package let deadline: NIODeadline
        package var precedence: StreamPrecedence = .urgent

        package init(id: UInt64, recipient: Recipient, deadline: NIODeadline, precedence: StreamPrecedence = .urgent) {
            self.id = id
            self.recipient = recipient
            self.deadline = deadline
            self.precedence = precedence
        }
    }

    /// Side effects to perform after the lock is released.
    package struct Actions: Sendable {
        package var leases: [(waiter: Waiter, connection: Connection)] = []
        package var failures: [(waiter: Waiter, error: TransportError)] = []
        package var open: HTTP2ConnectionPlan<Connection.Endpoint>?
        package var close: [Connection] = []
        /// Schedule the waiter-deadline timer for this instant (then hand it to `attachWaiterTimer`).
        package var armWaiterTimer: NIODeadline?
        /// A waiter-deadline timer that is no longer needed.
        package var cancelWaiterTimer: Scheduled<Void>?

        static var none: Actions { Actions() }
    }

    package enum LeaseAttempt {
        case leased(Connection)
        case mustWait
        case failed(TransportError)
    }

    package enum EnqueueResult {
        case leased(Connection)
        case queued(Actions)
        case failed(TransportError)
    }

    /// One timer for all queued callers, armed for the earliest deadline: queuing costs no timer
    /// work when deadlines arrive in order (the usual case), and a firing sweeps the queue once.
    struct WaiterTimer {
        var deadline: NIODeadline
        var scheduled: Scheduled<Void>?
    }

    enum Phase: Equatable {
        case connecting
        case ready
        /// GOAWAY received: in-flight streams finish, no new ones.
        case draining
    }

    struct Slot {
        let id: Int
        var phase: Phase
        var connection: Connection?
        var serverStreamLimit = 1
        var inUse = 0
        /// Whether a request succeeded on it (APNs with token authentication allows one stream until then).
        var verified: Bool
        /// Whether any answer arrived on this connection (it works; resets the backoff).
        var answered = false
        /// Whether this connection already counted towards the backoff.
        var countedAsFailure = false

        /// The most streams this connection carried at once (for tests and diagnostics).
        var peakInUse = 0

        mutating func lease(_ count: Int = 1) {
            inUse += count
            peakInUse = max(peakInUse, inUse)
        }

        var freeStreams: Int {
            guard phase == .ready else { return 0 }
            return (verified ? serverStreamLimit : min(1, serverStreamLimit)) - inUse
        }
    }

    struct Pool {
        var slots: [Slot] = []
        var waiters = WaiterQueue()
        var consecutiveFailures = 0
        /// When the latest connection attempt failed before it was ready (nil: none yet, or a
        /// connection became ready since).
        var lastConnectFailure: NIODeadline?

        var liveSlots: Int { slots.reduce(0) { $0 + ($1.phase == .draining ? 0 : 1) } }
        var hasConnecting: Bool { slots.contains { $0.phase == .connecting } }
        var hasReady: Bool { slots.contains { $0.phase == .ready } }

        func index(of connectionID: Int) -> Int? {
            slots.firstIndex { $0.id == connectionID }
        }

        /// The ready connection to lease `share` streams from: one `isLocal` (on the caller's
        /// event loop) with room for all of them, else the one with the most free streams.
        func bestSlot(for share: Int = 1, preferring isLocal: (Connection) -> Bool = { _ in false }) -> Int? {
            if let local = slots.firstIndex(where: { $0.freeStreams >= share && $0.connection.map(isLocal) == true }) { return local }
            let best = slots.indices.max { slots[$0].freeStreams < slots[$1].freeStreams }
            return best.flatMap { slots[$0].freeStreams > 0 ? $0 : nil }
        }
    }

    /// The most streams of a batch that share a connection when others have free streams: a hop
    /// to another event loop costs a wake-up, a stream more on a connection Herald's encoding
    /// and the server's answer of one request.
    static var smallBatch: Int { 8 }

    /// The longest wait after the n-th consecutive connection failure (none before the first).
    static func backoff(afterFailures failures: Int) -> Duration {
        failures > 0 ? Backoff.reconnection.ceiling(afterAttempt: failures) : .zero
    }

    let connectionsPerEndpoint: Int
    let maximumWaiters: Int
    let requiresVerification: Bool
    /// The server's name in errors ("APNs", "FCM").
    let peerName: String
    /// Set by ``shutDown()``: no new streams or connections, and late connections close at once.
    var isShutDown = false
    /// The endpoints seen so far, and their pools at the same index (APNs has two, FCM one).
    var endpoints: [Connection.Endpoint] = []
    var pools: [Pool] = []
    var nextConnectionID = 0
    var waiterTimer: WaiterTimer?

    package init(connectionsPerEndpoint: Int, maximumWaiters: Int, requiresVerification: Bool, peerName: String) {
        self.peerName = peerName
        self.connectionsPerEndpoint = max(1, connectionsPerEndpoint)
        self.maximumWaiters = max(0, maximumWaiters)
        self.requiresVerification = requiresVerification
    }

    mutating func indexOfPool(_ endpoint: Connection.Endpoint) -> Int {
        if let index = endpoints.firstIndex(of: endpoint) { return index }
        endpoints.append(endpoint)
        pools.append(Pool())
        return pools.count - 1
    }

    /// `endpoint`'s pool, empty when it has none yet.
    func existingPool(_ endpoint: Connection.Endpoint) -> Pool {
        endpoints.firstIndex(of: endpoint).map { pools[$0] } ?? Pool()
    }

    // MARK: Lifecycle

    /// Stops taking requests: returns the waiters to fail, the connections to close gracefully and
    /// the waiter timer to cancel.
    package mutating func shutDown() -> (waiters: [Waiter], connections: [Connection], timer: Scheduled<Void>?) {
        guard !isShutDown else { return ([], [], nil) }
        isShutDown = true
        let timer = waiterTimer?.scheduled
        waiterTimer = nil
        var waiters: [Waiter] = []
        var connections: [Connection] = []
        for index in pools.indices {
            waiters += pools[index].waiters.removeAll()
            connections.append(contentsOf: pools[index].slots.compactMap(\.connection))
        }
        return (waiters, connections, timer)
    }

    /// Connections open (not draining) to `endpoint`, the most streams one carried
    /// at once, and the streams in use now.
    package func snapshot(_ endpoint: Connection.Endpoint) -> (liveConnections: Int, peakStreamsPerConnection: Int, streamsInUse: Int) {
        let pool = existingPool(endpoint)
        return (pool.liveSlots, pool.slots.map(\.peakInUse).max() ?? 0, pool.slots.reduce(0) { $0 + $1.inUse })
    }

    /// What this pool knows of the endpoint's reachability: a connection is ready, or when the
    /// latest attempt to open one failed (neither: nothing known, e.g. never needed).
    package func reachability(_ endpoint: Connection.Endpoint) -> HTTP2EndpointReachability {
        let pool = existingPool(endpoint)
        return HTTP2EndpointReachability(hasReadyConnection: pool.hasReady, lastConnectFailure: pool.lastConnectFailure)
    }

    // MARK: Leasing streams

    /// The fast path: a free stream now, or `.mustWait` (also when others wait ahead of it).
    package mutating func leaseIfAvailable(_ endpoint: Connection.Endpoint, precedence: StreamPrecedence = .urgent) -> LeaseAttempt {
        if isShutDown { return .failed(.shuttingDown("\(peerName) client is shutting down")) }
        return leaseFreeStreams(endpoint, upTo: 1, precedence: precedence).first.map { .leased($0) } ?? .mustWait
    }

    /// Up to `count` free streams, split evenly over the connections with free streams (most
    /// free first) so they answer a large batch in parallel, but a batch of up to
    /// ``smallBatch`` on one connection: one hop to one event loop, none when a connection
    /// `isLocal` (on the caller's own event loop) has room for all of it. None while requests of
    /// the same or a higher precedence wait (they go first) or after shutdown.
    package mutating func leaseFreeStreams(
        _ endpoint: Connection.Endpoint,
        upTo count: Int,
        precedence: StreamPrecedence = .urgent,
        preferring isLocal: (Connection) -> Bool = { _ in false }
    ) -> [Connection] {
        let poolIndex = indexOfPool(endpoint)
        guard !isShutDown, !pools[poolIndex].waiters.hasWaiters(aheadOf: precedence) else { return [] }
        let connections = max(1, pools[poolIndex].slots.count { $0.freeStreams > 0 })
        let evenShare = max(Self.smallBatch, (count + connections - 1) / connections)
        // A large batch is split over the connections (and their event loops) to be answered in parallel.
        let local = count <= Self.smallBatch ? isLocal : { _ in false }
        var leased: [Connection] = []
        while leased.count < count, let slot = pools[poolIndex].bestSlot(for: min(count - leased.count, evenShare), preferring: local) {
            let share = min(count - leased.count, evenShare, pools[poolIndex].slots[slot].freeStreams)
            pools[poolIndex].slots[slot].lease(share)
            leased += repeatElement(pools[poolIndex].slots[slot].connection!, count: share)
        }
        return leased
    }

    /// Leases a stream if one is free, otherwise queues `waiter` (opening a connection when allowed).
    package mutating func enqueue(_ waiter: Waiter, for endpoint: Connection.Endpoint) -> EnqueueResult {
        if isShutDown { return .failed(.shuttingDown("\(peerName) client is shutting down")) }
        if let connection = leaseFreeStreams(endpoint, upTo: 1, precedence: waiter.precedence).first { return .leased(connection) }
        let poolIndex = indexOfPool(endpoint)
        if let overloaded = queue(waiter, poolIndex) { return .failed(overloaded) }
        return .queued(waitersQueued(poolIndex, endpoint, earliestDeadline: waiter.deadline))
    }

    /// Queues the requests of a batch that found no free stream (``leaseFreeStreams(_:upTo:precedence:)``)
    /// as ``enqueue(_:for:)`` queues one: waiters beyond the queue's bound fail `overloaded`, a
    /// connection is planned when allowed, and a stream freed since the batch's lease serves
    /// them at once.
    package mutating func enqueue(_ waiters: [Waiter], for endpoint: Connection.Endpoint) -> Actions {
        guard !isShutDown else {
            return Actions(failures: waiters.map { ($0, .shuttingDown("\(peerName) client is shutting down")) })
        }
        let poolIndex = indexOfPool(endpoint)
        var failures: [(waiter: Waiter, error: TransportError)] = []
        for waiter in waiters {
            if let overloaded = queue(waiter, poolIndex) { failures.append((waiter, overloaded)) }
        }
        guard let earliest = waiters.map(\.deadline).min(), failures.count < waiters.count else { return Actions(failures: failures) }
        var actions = waitersQueued(poolIndex, endpoint, earliestDeadline: earliest)
        actions.failures = failures
        actions.leases = serveWaiters(poolIndex).leases
        return actions
    }

    /// Appends `waiter` to the queue; the error when the queue is full.
    mutating func queue(_ waiter: Waiter, _ poolIndex: Int) -> TransportError? {
        guard pools[poolIndex].waiters.count < maximumWaiters else {
            return .overloaded("\(maximumWaiters) requests already wait for an \(peerName) stream")
        }
        pools[poolIndex].waiters.append(waiter)
        return nil
    }

    /// After waiters were queued: a connection to open, and the waiter timer when
    /// `earliestDeadline` comes before the one armed.
    mutating func waitersQueued(_ poolIndex: Int, _ endpoint: Connection.Endpoint, earliestDeadline: NIODeadline) -> Actions {
        var actions = Actions()
        actions.open = planConnectionIfNeeded(poolIndex, endpoint)
        if waiterTimer.map({ earliestDeadline < $0.deadline }) ?? true {
            actions.cancelWaiterTimer = waiterTimer?.scheduled
            waiterTimer = WaiterTimer(deadline: earliestDeadline, scheduled: nil)
            actions.armWaiterTimer = earliestDeadline
        }
        return actions
    }

    /// Stores the timer scheduled for `deadline`; false when a timer for an earlier deadline
    /// replaced it meanwhile (cancel it then).
    package mutating func attachWaiterTimer(_ timer: Scheduled<Void>, deadline: NIODeadline) -> Bool {
        guard let current = waiterTimer, current.deadline == deadline, current.scheduled == nil else { return false }
        waiterTimer?.scheduled = timer
        return true
    }

    /// The waiter timer armed for `timerDeadline` fired: fails every waiter whose deadline passed
    /// and arms the timer for the earliest remaining one.
    package mutating func waiterTimerFired(timerDeadline: NIODeadline, now: NIODeadline) -> Actions {
        guard let timer = waiterTimer, timer.deadline == timerDeadline else { return .none }
        waiterTimer = nil
        var actions = Actions()
        var earliest: NIODeadline?
        let error = TransportError.deadlineExceeded("no \(peerName) stream became free before the deadline")
        for poolIndex in pools.indices where !pools[poolIndex].waiters.isEmpty {
            let (expired, earliestKept) = pools[poolIndex].waiters.removeExpired(at: now)
            actions.failures += expired.map { (waiter: $0, error: error) }
            if let earliestKept { earliest = earliest.map { min($0, earliestKept) } ?? earliestKept }
        }
        if let earliest {
            waiterTimer = WaiterTimer(deadline: earliest, scheduled: nil)
            actions.armWaiterTimer = earliest
        }
        return actions
    }

    /// Removes a waiter whose deadline passed or whose task was cancelled.
    package mutating func removeWaiter(_ id: UInt64, for endpoint: Connection.Endpoint) -> Waiter? {
        let poolIndex = indexOfPool(endpoint)
        return pools[poolIndex].waiters.remove(id: id)
    }

    /// A stream ended. `status` is the server's answer, nil when there was none.
    package mutating func release(connectionID: Int, endpoint: Connection.Endpoint, status: Int?) -> Actions {
        let poolIndex = indexOfPool(endpoint)
        guard !isShutDown, let slot = pools[poolIndex].index(of: connectionID) else { return .none }
        pools[poolIndex].slots[slot].inUse -= 1
        if status != nil {
            if !pools[poolIndex].slots[slot].answered {
                pools[poolIndex].slots[slot].answered = true
                pools[poolIndex].consecutiveFailures = 0
            }
            if let status, (200..<300).contains(status) { pools[poolIndex].slots[slot].verified = true }
        }
        if pools[poolIndex].waiters.isEmpty { return .none }
        return serveWaiters(poolIndex)
    }

    // MARK: Helpers

    /// Hands free streams to waiters, urgent ones first.
    mutating func serveWaiters(_ poolIndex: Int) -> Actions {
        var actions = Actions()
        while !pools[poolIndex].waiters.isEmpty, let slot = pools[poolIndex].bestSlot() {
            guard let waiter = pools[poolIndex].waiters.popFirst() else { break }
            pools[poolIndex].slots[slot].lease()
            actions.leases.append((waiter, pools[poolIndex].slots[slot].connection!))
        }
        return actions
    }

}

extension Backoff {
    /// Reconnecting after consecutive failures: 100 ms doubling up to 30 s, waiting at
    /// least half of that (the pool plans the ceiling; the jitter is drawn where the connection
    /// is opened).
    package static let reconnection = Backoff(initial: .milliseconds(100), maximum: .seconds(30), floorPercent: 50)
}
