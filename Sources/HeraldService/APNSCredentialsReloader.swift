import APNSHTTP2
import Logging
import Metrics
import ServiceLifecycle
import Synchronization
import UnixSignals

/// Re-reads HERALD_APNS_CREDENTIALS_FILE on SIGHUP and every `checkInterval` (and, without
/// that file, keeps SIGHUP from ending the process), and hands what it
/// finds to the APNs clients (device sends, broadcasts, channel management): a replaced key or certificate gets new connections while requests
/// in flight finish on the old ones (``APNSHTTP2Client/replaceCredentials(default:byTopic:)``).
///
/// A file that no longer reads or parses changes nothing: the credentials in use stay, and the
/// problem is logged once (until it changes) and counted in
/// `herald_apns_credentials_reloads_total{result="failed"}`.
final class APNSCredentialsReloader: Service {
    private let path: String?
    private let defaultCredential: APNSClientConfiguration.Authentication?
    private let clients: [APNSHTTP2Client]
    private let checkInterval: Duration
    private let logger: Logger
    private let reloads: (applied: Counter, unchanged: Counter, failed: Counter)
    /// The last failure reported, so a broken file is not logged at every check. Also serialises
    /// reloads (SIGHUP and the periodic check may coincide).
    private let lastFailure = Mutex<String?>(nil)

    init(
        path: String?,
        defaultCredential: APNSClientConfiguration.Authentication?,
        clients: [APNSHTTP2Client],
        checkInterval: Duration,
        metricsFactory: any MetricsFactory,
        logger: Logger
    ) {
        self.path = path
        self.defaultCredential = defaultCredential
        self.clients = clients
        self.checkInterval = checkInterval
        self.logger = logger
        func counter(_ result: String) -> Counter {
            Counter(label: "herald_apns_credentials_reloads_total", dimensions: [("result", result)], factory: metricsFactory)
        }
        reloads = (counter("applied"), counter("unchanged"), counter("failed"))
    }

    func run() async throws {
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

    /// Reads the file and applies it when it differs from what the client uses.
    func reload(trigger: String) {
        guard let path else {
            logger.notice("\(trigger): no HERALD_APNS_CREDENTIALS_FILE to re-read")
            return
        }
        lastFailure.withLock { lastFailure in
            do {
                let (credentials, problems) = try APNSCredentialsFile.loadReportingCertificates(path: path)
                // Every client gets the same credentials; the first to refuse one leaves all unchanged.
                var changed = false
                for client in clients {
                    changed = try client.replaceCredentials(default: defaultCredential, byTopic: credentials) || changed
                }
                lastFailure = nil
                guard changed else {
                    reloads.unchanged.increment()
                    return
                }
                reloads.applied.increment()
                logger.notice(
                    "APNs credentials file applied",
                    metadata: ["herald.credentials_file": "\(path)", "herald.trigger": "\(trigger)", "herald.topics": "\(credentials.count)"]
                )
                for problem in problems { logger.error("\(problem)") }
            } catch {
                reloads.failed.increment()
                let description = "\(error)"
                guard description != lastFailure else { return }
                lastFailure = description
                logger.error(
                    "APNs credentials file not applied; the credentials in use stay",
                    metadata: ["herald.credentials_file": "\(path)", "herald.trigger": "\(trigger)", "error": "\(description)"]
                )
            }
        }
    }
}
