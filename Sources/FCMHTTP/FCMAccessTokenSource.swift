import JSONCore
import PushCore
import AsyncHTTPClient
import FCMCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
public import ServiceLifecycle
import Synchronization

/// OAuth access tokens for FCM, one per Firebase project, shared by every request.
///
/// ``run()`` fetches a token for each project at start, then refreshes each one
/// ``FCMClientConfiguration/tokenRefreshMargin`` before it expires, in the background: the loop
/// sleeps until the next refresh is due and wakes early when a caller needs a token it does not
/// have (at start, after ``invalidate(_:)``) or the credentials change. A failed exchange is
/// retried with backoff; meanwhile a still-valid token stays in use. ``isReady`` is false only
/// while no project has a valid token.
public final class FCMAccessTokenSource: Service, Sendable {
    /// An access token and when it expires.
    public struct AccessToken: Sendable, Hashable, CustomStringConvertible {
        /// The bearer token (never logged).
        public let value: String
        public let expiresAt: ContinuousClock.Instant

        public var description: String { "access token \(value.prefix(6))… expiring at \(expiresAt)" }
    }

    /// How a project's tokens are had: a signed assertion exchanged at the key's `token_uri`,
    /// or the metadata server's.
    private enum Grant: Sendable {
        case assertion(OAuthAssertionSigner)
        case metadataServer(FCMServiceAccount)

        init(_ account: FCMServiceAccount) throws(FCMServiceAccountError) {
            self = account.usesMetadataServer ? .metadataServer(account) : .assertion(try OAuthAssertionSigner(account: account))
        }

        var account: FCMServiceAccount {
            switch self {
            case .assertion(let signer): signer.account
            case .metadataServer(let account): account
            }
        }
    }

    private struct Project {
        var grant: Grant
        var token: AccessToken?
        var refreshAt: ContinuousClock.Instant?
        var fetching = false
        var failures = 0
        var retryAt: ContinuousClock.Instant?
        var lastFailure: String?
        var waiters: [UInt64: CheckedContinuation<AccessToken, any Error>] = [:]
    }

    private struct State {
        var projects: [String: Project] = [:]
        var nextWaiterID: UInt64 = 0
        var isStopped = false
    }

    private let state: Mutex<State>
    private let wakeup = Wakeup()
    private let httpClient: HTTPClient
    private let configuration: FCMClientConfiguration
    private let metrics: FCMClientMetrics
    private let logger: Logger
    private let clock: any TokenSourceClock

    /// Parses every account's key (throws when one is not an RSA key); fetches nothing until
    /// ``run()``. `httpClient` carries the exchanges; its owner shuts it down. Tokens expire and
    /// are refreshed by `clock`.
    init(
        configuration: FCMClientConfiguration,
        httpClient: HTTPClient,
        metrics: FCMClientMetrics,
        clock: any TokenSourceClock,
        logger: Logger
    ) throws(FCMServiceAccountError) {
        self.configuration = configuration
        self.clock = clock
        self.metrics = metrics
        self.httpClient = httpClient
        self.logger = logger
        var projects: [String: Project] = [:]
        for (projectID, account) in configuration.credentials.accountsByProject {
            projects[projectID] = Project(grant: try Grant(account))
        }
        self.state = Mutex(State(projects: projects))
        metrics.prepare(projectIDs: projects.keys)
    }

    /// True when some project has an access token that has not expired (or none is
    /// configured): a project whose exchanges fail leaves Herald ready for the others, and shows
    /// in `herald_fcm_token_refresh_failures_total{project}` (HeraldFCMTokenRefreshFailing).
    public var isReady: Bool {
        let now = clock.now
        return state.withLock { state in
            state.projects.isEmpty || state.projects.values.contains { ($0.token?.expiresAt).map { $0 > now } ?? false }
        }
    }

    /// Why the last exchange of a project failed, while it has no valid token; for logs and probes.
    public func lastFailure(projectID: String) -> String? {
        state.withLock { $0.projects[projectID]?.lastFailure }
    }

    /// A valid token for `projectID`, waiting for an exchange (until `deadline`) when there is none.
    public func accessToken(projectID: String, deadline: ContinuousClock.Instant) async throws -> AccessToken {
        if let cached = validAccessToken(projectID: projectID) { return cached }
        return try await withThrowingTaskGroup(of: AccessToken.self) { group in
            group.addTask { try await self.waitForToken(projectID: projectID) }
            group.addTask {
                try await Task.sleep(until: deadline, clock: .continuous)
                throw TransportError.deadlineExceeded("waiting for an access token")
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }

    /// The project's access token when it is valid for at least another second, without waiting.
    func validAccessToken(projectID: String) -> AccessToken? {
        let now = clock.now
        return state.withLock { state in
            guard let token = state.projects[projectID]?.token, token.expiresAt > now + .seconds(1) else { return nil }
            return token
        }
    }

    /// Drops `token` after FCM refused it (401 UNAUTHENTICATED) so the next caller gets a new
    /// one. Many requests refused with the same token cause one exchange.
    public func invalidate(_ token: AccessToken, projectID: String) {
        let changed = state.withLock { state -> Bool in
            guard state.projects[projectID]?.token == token else { return false }
            state.projects[projectID]?.token = nil
            state.projects[projectID]?.refreshAt = nil
            state.projects[projectID]?.retryAt = nil
            return true
        }
        if changed {
            logger.info("FCM refused an access token; exchanging a new one", metadata: ["fcm.project": "\(projectID)"])
            wakeup.signal()
        }
    }

    /// Replaces the accounts (a credentials reload): a project whose account is unchanged keeps
    /// its token, a changed or new one is exchanged at once, a removed one is dropped. A changed
    /// account (a rotated key) keeps using the previous key's token until the new key's first
    /// exchange succeeds or that token expires: a key Google refuses (counted and alerted as a
    /// failed refresh) never takes a working token away early.
    func update(_ credentials: FCMCredentials) throws(FCMServiceAccountError) {
        var grants: [String: Grant] = [:]
        for (projectID, account) in credentials.accountsByProject {
            grants[projectID] = try Grant(account)
        }
        metrics.prepare(projectIDs: grants.keys)
        let dropped = state.withLock { state -> [CheckedContinuation<AccessToken, any Error>] in
            var dropped: [CheckedContinuation<AccessToken, any Error>] = []
            for (projectID, project) in state.projects where grants[projectID] == nil {
                dropped += project.waiters.values
                state.projects[projectID] = nil
            }
            for (projectID, grant) in grants where state.projects[projectID]?.grant.account != grant.account {
                let previous = state.projects[projectID]
                state.projects[projectID] = Project(grant: grant, token: previous?.token, waiters: previous?.waiters ?? [:])
            }
            return dropped
        }
        for waiter in dropped { waiter.resume(throwing: TransportError.accessTokenUnavailable("the project's credential was removed")) }
        wakeup.signal()
    }

    /// Exchanges and refreshes tokens until cancelled or gracefully shut down.
    public func run() async throws {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                while !Task.isCancelled {
                    let (due, nextWake) = self.takeDueExchanges(now: self.clock.now)
                    for projectID in due {
                        group.addTask { await self.exchange(projectID: projectID) }
                    }
                    if self.state.withLock({ $0.isStopped }) { break }
                    await self.wakeup.wait(until: nextWake, clock: self.clock)
                }
                group.cancelAll()
            }
        } onGracefulShutdown: {
            self.state.withLock { $0.isStopped = true }
            self.wakeup.signal()
        }
        let waiters = state.withLock { state in
            state.isStopped = true
            return state.projects.keys.flatMap { projectID in
                defer { state.projects[projectID]?.waiters = [:] }
                return Array(state.projects[projectID]!.waiters.values)
            }
        }
        for waiter in waiters { waiter.resume(throwing: TransportError.shuttingDown("the token source stopped")) }
    }

    /// Marks the projects whose exchange is due as fetching; returns them and when the loop
    /// must look again.
    private func takeDueExchanges(now: ContinuousClock.Instant) -> (due: [String], nextWake: ContinuousClock.Instant?) {
        state.withLock { state in
            var due: [String] = []
            var nextWake: ContinuousClock.Instant?
            for (projectID, project) in state.projects where !project.fetching {
                let wanted = project.token == nil ? (project.retryAt ?? now) : (project.refreshAt ?? now)
                let when = max(wanted, project.retryAt ?? wanted)
                if when <= now {
                    due.append(projectID)
                    state.projects[projectID]?.fetching = true
                } else {
                    nextWake = min(nextWake ?? when, when)
                }
            }
            return (due, nextWake)
        }
    }

    private func waitForToken(projectID: String) async throws -> AccessToken {
        let id = state.withLock { state -> UInt64 in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<AccessToken, any Error>) in
                let now = clock.now
                let outcome = state.withLock { state -> Result<AccessToken, any Error>? in
                    guard !state.isStopped else { return .failure(TransportError.shuttingDown("the token source stopped")) }
                    guard let project = state.projects[projectID] else {
                        return .failure(TransportError.accessTokenUnavailable("no credential for the project"))
                    }
                    if let token = project.token, token.expiresAt > now { return .success(token) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    // No token and an exchange failed lately: fail now rather than wait the backoff.
                    if let failure = project.lastFailure, !project.fetching, project.retryAt.map({ $0 > now }) ?? false {
                        return .failure(TransportError.accessTokenUnavailable(failure))
                    }
                    state.projects[projectID]?.waiters[id] = continuation
                    return nil
                }
                if let outcome {
                    continuation.resume(with: outcome)
                } else {
                    wakeup.signal()
                }
            }
        } onCancel: {
            let waiter = state.withLock { $0.projects[projectID]?.waiters.removeValue(forKey: id) }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// One exchange for `projectID`; stores the token or the failure and answers the waiters.
    private func exchange(projectID: String) async {
        guard let grant = state.withLock({ $0.projects[projectID]?.grant }) else { return }
        let result: Result<(token: AccessToken, lifetime: Duration), TransportError>
        do {
            result = .success(try await requestToken(grant))
        } catch let error as TransportError {
            result = .failure(error)
        } catch {
            result = .failure(.accessTokenUnavailable("\(type(of: error))"))
        }
        let now = clock.now
        let waiters = state.withLock { state -> [CheckedContinuation<AccessToken, any Error>] in
            guard var project = state.projects[projectID], project.grant.account == grant.account else { return [] }
            project.fetching = false
            switch result {
            case .success(let fetched):
                project.token = fetched.token
                // Counted from when the exchange was sent, as the token's expiry is.
                project.refreshAt = fetched.token.expiresAt - min(configuration.tokenRefreshMargin, fetched.lifetime / 2)
                project.failures = 0
                project.retryAt = nil
                project.lastFailure = nil
            case .failure(let error):
                project.failures += 1
                var generator = SystemRandomNumberGenerator()
                project.retryAt = now + configuration.tokenRetryBackoff.delay(afterAttempt: project.failures, using: &generator)
                project.lastFailure = error.detail
            }
            let waiters = Array(project.waiters.values)
            project.waiters = [:]
            state.projects[projectID] = project
            return waiters
        }
        metrics.tokenExchange(projectID: projectID, succeeded: (try? result.get()) != nil)
        switch result {
        case .success(let fetched):
            logger.debug("FCM access token exchanged", metadata: ["fcm.project": "\(projectID)", "fcm.token_lifetime": "\(fetched.lifetime)"])
            for waiter in waiters { waiter.resume(returning: fetched.token) }
        case .failure(let error):
            logger.warning("FCM access token exchange failed", metadata: ["fcm.project": "\(projectID)", "error": "\(error)"])
            for waiter in waiters { waiter.resume(throwing: error) }
        }
        wakeup.signal()
    }

    /// POSTs the assertion to `token_uri` (or asks the metadata server) and reads
    /// `access_token` and `expires_in`.
    private func requestToken(_ grant: Grant) async throws -> (token: AccessToken, lifetime: Duration) {
        var request = HTTPClientRequest(url: grant.account.tokenURI)
        switch grant {
        case .assertion(let signer):
            let assertion = try signer.assertion(issuedAt: WallClock.secondsSince1970())
            request.method = .POST
            request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
            let form = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"
            request.body = .bytes(ByteBuffer(string: form))
        case .metadataServer:
            // https://cloud.google.com/compute/docs/access/authenticate-workloads: the header
            // proves the request is not a forwarded browser request.
            request.method = .GET
            request.headers.add(name: "metadata-flavor", value: "Google")
        }
        let sentAt = clock.now
        let response: HTTPClientResponse
        let body: ByteBuffer
        do {
            let deadline = NIODeadline.now() + TimeAmount(configuration.tokenRequestTimeout)
            response = try await httpClient.execute(request, deadline: deadline, logger: logger)
            body = try await response.body.collect(upTo: configuration.maximumResponseBytes)
        } catch {
            throw TransportError.accessTokenUnavailable("token endpoint: \(TransportError.reading(error, deadlinePassed: false))")
        }
        let document = try? JSONValue(parsing: body.readableBytesView)
        guard response.status == .ok, let value = document?["access_token"]?.stringValue, !value.isEmpty,
            case .number(let expiresText)? = document?["expires_in"], let seconds = Int64(expiresText), seconds > 0
        else {
            let code = document?["error"]?.stringValue ?? "no token in the answer"
            throw TransportError.accessTokenUnavailable("token endpoint answered \(response.status.code) (\(code))")
        }
        let lifetime = Duration.seconds(seconds)
        return (AccessToken(value: value, expiresAt: sentAt + lifetime), lifetime)
    }
}
