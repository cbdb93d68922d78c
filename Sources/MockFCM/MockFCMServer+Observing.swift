import Synchronization

extension MockFCMServer {
    /// Messages delivered (200, not validate-only) to a registration token or FID.
    public func deliveredCount(token: String) -> Int {
        ledger.withLock { $0.deliveredByToken[token] ?? 0 }
    }

    /// Messages that named `token` and passed the checks, whatever the answer.
    public func requestCount(token: String) -> Int {
        ledger.withLock { $0.requestsByToken[token] ?? 0 }
    }

    /// Messages delivered over all tokens.
    public var totalDelivered: Int {
        ledger.withLock { $0.totalDelivered }
    }

    /// Answers per HTTP status, over both endpoints.
    public func statusCounts() -> [Int: Int] {
        ledger.withLock { $0.countsByStatus }
    }

    /// Access tokens issued by the token endpoint.
    public var tokenExchangeCount: Int {
        ledger.withLock { $0.tokenExchanges }
    }

    /// Messages delivered with an access token exchanged for an assertion signed by the key
    /// `keyID` (the assertion's `kid`, the key file's `private_key_id`).
    public func deliveredCount(keyID: String) -> Int {
        ledger.withLock { $0.deliveredByKeyID[keyID] ?? 0 }
    }

    /// Assertions the token endpoint refused.
    public var refusedAssertionCount: Int {
        ledger.withLock { $0.refusedAssertions }
    }

    /// The most recent send requests, oldest first (at most ``MockFCMConfiguration/requestLogLimit``).
    public func receivedMessages() -> [ReceivedMessage] {
        ledger.withLock { Array($0.log) }
    }

    /// From now on, messages to `token` answer 404 UNREGISTERED.
    public func markUnregistered(token: String) {
        ledger.withLock { _ = $0.unregisteredTokens.insert(token) }
    }

    /// The next messages to `token` get `faults`, one each, before it is answered normally again.
    public func script(token: String, _ faults: [MockFCMScriptedFault]) {
        ledger.withLock { $0.scripts[token, default: []] += faults }
    }

    /// Spends `projectID`'s quota for `duration` from now: every send to the project is answered
    /// 429 QUOTA_EXCEEDED with a QuotaFailure naming the project's quota and `Retry-After` the
    /// seconds left, as Google answers until the quota's minute rolls.
    public func exhaustQuota(ofProject projectID: String, for duration: Duration) {
        let until = configuration.wallClockMilliseconds() + duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        ledger.withLock { $0.quotaExhaustedUntil[projectID] = until }
    }

    /// Access tokens the metadata server's endpoint issued so far.
    public var metadataTokensIssued: Int { ledger.withLock { $0.metadataTokensIssued } }

    /// Every access token issued so far expires now: the next send with one answers 401.
    public func expireAccessTokens() {
        ledger.withLock { ledger in
            for token in ledger.accessTokens.keys { ledger.accessTokens[token]?.expiresAtMilliseconds = 0 }
        }
    }

    /// From now on, injects `faults`' statuses and latency (GOAWAY stays as configured at start).
    public func setFaults(_ faults: MockFCMFaults) {
        ledger.withLock { $0.faults = faults }
    }

    /// The latency to add before processing a request (read per request).
    var currentLatency: Duration? {
        ledger.withLock { $0.faults.latency }
    }
}
