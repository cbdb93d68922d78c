package import APNSHTTP2
package import FCMHTTP
package import WebPushHTTP
package import WebPushCore
package import Logging
package import Metrics
import FCMCore
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Re-reads HERALD_CREDENTIALS_FILE on SIGHUP and every `checkInterval` (and, without
/// that file, keeps SIGHUP from ending the process), and hands what it
/// finds to the APNs clients (device sends, broadcasts, channel management): a replaced key or certificate gets new connections while requests
/// in flight finish on the old ones (``APNSHTTP2Client/replaceCredentials(default:byTopic:)``).
///
/// The file's FCM entries go to the FCM client (``FCMHTTPClient/updateCredentials(_:)``), with
/// HERALD_FCM_SERVICE_ACCOUNT_PATH's account, read again at each reload (SIGHUP reloads it also
/// without a credentials file), serving the packages no entry lists: a changed project's access
/// token is exchanged again (the previous one serves until that succeeds or expires), requests
/// in flight finish with the one they had.
///
/// Its web push entries go to the web push client (``WebPushHTTPClient/updateCredentials(_:)``),
/// with HERALD_WEBPUSH_VAPID_KEY_PATH's key serving the apps no entry lists.
///
/// A file that no longer reads or parses changes nothing: the credentials in use stay, and the
/// problem is logged once (until it changes) and counted in
/// `herald_credentials_reloads_total{result="failed"}`. So does a file that gains FCM
/// entries when Herald started without any FCM credential (no FCM client runs: restart it).
package final class CredentialsReloader: Service {
    /// The FCM client and the credentials it was last given (the default account included).
    package struct FCM {
        package var client: FCMHTTPClient
        package var credentials: FCMCredentials
        /// HERALD_FCM_SERVICE_ACCOUNT_PATH, read again at each reload.
        package var fallbackPath: String?

        package init(client: FCMHTTPClient, credentials: FCMCredentials, fallbackPath: String? = nil) {
            self.client = client
            self.credentials = credentials
            self.fallbackPath = fallbackPath
        }
    }

    private let path: String?
    private let defaultCredential: APNSClientConfiguration.Authentication?
    private let clients: [APNSHTTP2Client]
    private let fcm: Mutex<FCM?>
    private let webPush: WebPush?
    private let checkInterval: Duration
    private let logger: Logger
    private let reloads: (applied: Counter, unchanged: Counter, failed: Counter)
    /// The last failure reported, so a broken file is not logged at every check. Also serialises
    /// reloads (SIGHUP and the periodic check may coincide).
    private let lastFailure = Mutex<String?>(nil)
    private let metricsFactory: any MetricsFactory
    /// When the default credential's certificate expires (seconds since 1970; nil without one).
    private let defaultCertificateExpiry: Int64?
    /// `herald_tls_certificate_expiry_timestamp_seconds{kind="apns_client"}`: the earliest expiry
    /// of the APNs client certificates in use; none while no certificate is (a series at zero
    /// would read as expired).
    private let apnsCertificateExpiry = Mutex<Gauge?>(nil)

    /// The web push client and the key that serves the apps the file does not list.
    package struct WebPush: Sendable {
        package var client: WebPushHTTPClient
        /// HERALD_WEBPUSH_VAPID_KEY_PATH's key, read at start.
        package var fallback: WebPushCredentials.Entry?

        package init(client: WebPushHTTPClient, fallback: WebPushCredentials.Entry?) {
            self.client = client
            self.fallback = fallback
        }
    }

    package init(
        path: String?,
        defaultCredential: APNSClientConfiguration.Authentication?,
        clients: [APNSHTTP2Client],
        fcm: FCM? = nil,
        webPush: WebPush? = nil,
        checkInterval: Duration,
        metricsFactory: any MetricsFactory,
        logger: Logger
    ) {
        self.path = path
        self.defaultCredential = defaultCredential
        self.clients = clients
        self.fcm = Mutex(fcm)
        self.webPush = webPush
        self.checkInterval = checkInterval
        self.logger = logger
        self.metricsFactory = metricsFactory
        defaultCertificateExpiry = defaultCredential.flatMap { try? APNSCertificateFacts($0) }?.expirySeconds
        func counter(_ result: String) -> Counter {
            Counter(label: "herald_credentials_reloads_total", dimensions: [("result", result)], factory: metricsFactory)
        }
        reloads = (counter("applied"), counter("unchanged"), counter("failed"))
    }

    package func run() async throws {
        recordAPNSCertificateExpiry(inFile: path.flatMap { try? CredentialsFile.loadReportingCertificates(path: $0).certificates.earliestExpiry })
        // Trapping SIGHUP also stops it from ending the process (its default action).
        let hangUps = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    for await _ in hangUps { self.reload(trigger: "SIGHUP") }
                }
                guard self.path != nil else { return }
                group.addTask {
                    while (try? await Task.sleep(for: self.checkInterval)) != nil {
                        self.reload(trigger: "file check")
                    }
                }
            }
        }
    }

    /// Reads the file (and HERALD_FCM_SERVICE_ACCOUNT_PATH) and applies what differs from what
    /// the clients use.
    package func reload(trigger: String) {
        let fallbackPath = fcm.withLock { $0?.fallbackPath }
        guard path != nil || fallbackPath != nil else {
            logger.notice("\(trigger): no HERALD_CREDENTIALS_FILE to re-read")
            return
        }
        lastFailure.withLock { lastFailure in
            do {
                let fallback = try fallbackPath.map { path throws(FCMConfigurationError) in
                    try FCMClientConfiguration.serviceAccount(path: path, name: "HERALD_FCM_SERVICE_ACCOUNT_PATH")
                }
                guard let path else {
                    let changed = try applyFCM(entries: nil, fallback: fallback)
                    lastFailure = nil
                    (changed ? reloads.applied : reloads.unchanged).increment()
                    if changed { logger.notice("FCM default service account applied", metadata: ["herald.trigger": "\(trigger)"]) }
                    return
                }
                let (credentials, certificates) = try CredentialsFile.loadReportingCertificates(path: path)
                let fcmEntries = try CredentialsFile.fcmEntries(path: path)
                let webPushEntries = try CredentialsFile.webPushEntries(path: path)
                // FCM first: its keys were checked as the file was read, so what follows applies both.
                var changed = try applyFCM(entries: fcmEntries, fallback: fallback)
                if let webPush {
                    changed = webPush.client.updateCredentials(WebPushCredentials(entries: webPushEntries, fallback: webPush.fallback)) || changed
                }
                // Every client gets the same credentials; the first to refuse one leaves all unchanged.
                for client in clients {
                    changed = try client.replaceCredentials(default: defaultCredential, byTopic: credentials) || changed
                }
                lastFailure = nil
                recordAPNSCertificateExpiry(inFile: certificates.earliestExpiry)
                guard changed else {
                    reloads.unchanged.increment()
                    return
                }
                reloads.applied.increment()
                logger.notice(
                    "credentials file applied",
                    metadata: [
                        "herald.credentials_file": "\(path)", "herald.trigger": "\(trigger)", "herald.topics": "\(credentials.count)",
                        "herald.fcm_packages": "\(fcmEntries.reduce(0) { $0 + $1.packages.count })",
                    ]
                )
                for problem in certificates.problems { logger.error("\(problem)") }
            } catch {
                reloads.failed.increment()
                let description = "\(error)"
                guard description != lastFailure else { return }
                lastFailure = description
                logger.error(
                    "credentials file not applied; the credentials in use stay",
                    metadata: ["herald.credentials_file": "\(path ?? fallbackPath ?? "")", "herald.trigger": "\(trigger)", "error": "\(description)"]
                )
            }
        }
    }

    /// Records the earliest expiry of the APNs client certificates: the default credential's and
    /// `inFile`, the earliest of the file's as read last.
    private func recordAPNSCertificateExpiry(inFile: Int64?) {
        let expiry = [defaultCertificateExpiry, inFile].compactMap(\.self).min()
        apnsCertificateExpiry.withLock { gauge in
            guard let expiry else {
                gauge?.destroy()
                gauge = nil
                return
            }
            if gauge == nil {
                gauge = Gauge(label: "herald_tls_certificate_expiry_timestamp_seconds", dimensions: [("kind", "apns_client")], factory: metricsFactory)
            }
            gauge?.record(expiry)
        }
    }

    /// Gives the FCM client the file's FCM entries and the default account when they changed
    /// (nil: the ones in use stay); returns whether they did.
    private func applyFCM(entries: [FCMCredentials.Entry]?, fallback: FCMServiceAccount?) throws -> Bool {
        try fcm.withLock { fcm in
            guard var current = fcm else {
                guard entries?.isEmpty ?? true else {
                    throw ConfigurationError("the file lists FCM entries, but Herald started without an FCM credential: restart it to serve them")
                }
                return false
            }
            let updated = FCMCredentials(entries: entries ?? current.credentials.entries, fallback: fallback ?? current.credentials.fallback)
            guard updated != current.credentials else { return false }
            do {
                try current.client.updateCredentials(updated)
            } catch {
                throw ConfigurationError("FCM credentials: \(error)")
            }
            current.credentials = updated
            fcm = current
            return true
        }
    }
}
