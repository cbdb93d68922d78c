package import APNSHTTP2
import FCMHTTP
package import PostgresStores
import Foundation
import KafkaMessages
import KafkaTransport
package import Logging
import NIOPosix
import NIOSSL
#if OTLPTracing
import OTel
#endif
import Metrics
import PostgresNIO
package import Prometheus
import PushPipeline
import Tracing
package import ServiceLifecycle
import UnixSignals

/// Builds Herald's services from a configuration: the wiring `herald run` and the tests share.
package enum HeraldApplication {
    /// Applies the schema migrations, creates the delivery ledger's partitions for the
    /// retention window and the days ahead, and returns.
    package static func migrate(configuration: HeraldConfiguration, logger: Logger) async throws {
        try await withTokenStore(postgresURL: configuration.postgresURL, logger: logger) { store in
            try await store.migrate()
            let report = try await RegistryHousekeeping(configuration: configuration.housekeeping, store: store, logger: logger).maintainLedger()
            if report.skipped {
                logger.info("delivery ledger partitions not checked: another instance is maintaining them (the service's housekeeping does it)")
            } else {
                logger.info(
                    "delivery ledger partitions ready",
                    metadata: ["push.housekeeping.ledger_partitions_created": "\(report.partitionsCreated)"]
                )
            }
        }
    }

    /// Runs `body` with a registry connected to `postgresURL`, for one-off work outside the service.
    ///
    /// A server that refuses Herald (a password or client certificate it does not accept, a
    /// database that does not exist) ends the work at once with the server's reason; the pool
    /// alone would retry for a minute and then name no cause. A server not reachable yet is left
    /// to the pool's retries.
    package static func withTokenStore<Result: Sendable>(
        postgresURL: PostgresURL,
        logger: Logger,
        _ body: (PostgresStore) async throws -> Result
    ) async throws -> Result {
        do {
            try await PostgresConnection.connect(configuration: try postgresURL.connectionConfiguration(), id: 0, logger: logger).close()
        } catch let error as PSQLError where error.code == .server {
            throw PostgresRefused(url: postgresURL, error: error)
        } catch {
            logger.info("PostgreSQL not reachable yet; retrying", metadata: ["error": "\(error)"])
        }
        let client = PostgresClient(configuration: postgresURL.clientConfiguration(), backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            return try await body(PostgresStore(client: client, logger: logger))
        }
    }

    /// Runs Herald until SIGTERM or SIGINT: migrations first when configured, then the services.
    package static func run(configuration: HeraldConfiguration, logger: Logger) async throws {
        if configuration.migrateOnStart {
            try await migrate(configuration: configuration, logger: logger)
        }
        try await makeServiceGroup(configuration: configuration, logger: logger).run()
    }

    /// The services in dependency order; the group shuts them down in reverse, so the pipeline
    /// drains before the consumer leaves the group and the producer flushes.
    package static func makeServiceGroup(
        configuration: HeraldConfiguration,
        apnsOverride: APNSClientConfiguration? = nil,
        logger: Logger
    ) throws -> ServiceGroup {
        let apnsConfiguration = try apnsOverride ?? Self.apnsConfiguration(configuration)
        // The pipeline's tasks and its PostgreSQL connections share one event loop: a query is
        // written from the thread that owns its socket, and its answer resumes the task on that
        // thread, with no wake-up of another. At a steady load that cut both the context switches
        // and the CPU of a poll batch. The APNs and FCM connections stay spread over NIO's group
        // (this loop is one of its loops), and a small batch goes to a connection on its caller's
        // loop: with all of them on this one, the burst lost throughput (BENCHMARKS.md, "What each
        // change bought").
        let pipelineLoop = MultiThreadedEventLoopGroup.singleton.next()
        let (postgres, housekeepingPostgres) = Self.makePostgresClients(configuration, pipelineLoop: pipelineLoop, logger: logger)
        let store = PostgresStore(client: postgres, logger: logger)
        let metrics = PrometheusCollectorRegistry()
        let metricsFactory = Self.metricsFactory(metrics)
        // Which build each member runs (a rollout shows both revisions side by side).
        Gauge(label: "herald_build_info", dimensions: [("revision", configuration.buildRevision)], factory: metricsFactory).record(1)
        let housekeeping = RegistryHousekeeping(
            configuration: configuration.housekeeping,
            store: PostgresStore(client: housekeepingPostgres, logger: logger),
            metricsFactory: metricsFactory,
            logger: logger
        )
        let clients = try PushClients(configuration: configuration, apns: apnsConfiguration, metricsFactory: metricsFactory, logger: logger)
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: logger)
        let (consumer, bulkConsumer) = try Self.makeConsumers(configuration, logger: logger)
        let tracing = try configuration.tracesEnabled ? Self.tracingBackend(logger: logger) : nil
        let pipeline = NotificationPipeline(
            configuration: configuration.pipeline, source: consumer, bulkSource: bulkConsumer, publisher: producer, store: store, ledger: store,
            apns: clients.apns, broadcastAPNS: clients.broadcastAPNS, channelManagementAPNS: clients.channelsAPNS, fcm: clients.fcm,
            webPush: clients.webPush, metricsFactory: metricsFactory, tracer: tracing?.tracer,
            taskExecutor: EventLoopTaskExecutor(pipelineLoop, countingJobsIn: Counter(label: "herald_pipeline_jobs_total", factory: metricsFactory)),
            logger: logger
        )
        // Bounded and single-flight: while PostgreSQL is down a query may wait indefinitely.
        let database = SingleFlightProbe(timeout: .seconds(2)) { _ = try await postgres.query("SELECT 1", logger: logger) }
        let drain = DrainSignal()
        let health = Self.makeHealthServer(
            configuration: configuration,
            probes: HealthProbes(pipeline: pipeline, consumer: consumer, bulkConsumer: bulkConsumer, producer: producer, clients: clients, database: database),
            metrics: metrics,
            metricsFactory: metricsFactory,
            drain: drain,
            logger: logger
        )
        let certificateWatch = Self.certificateWatch(configuration, metricsFactory: metricsFactory, logger: logger)
        // The push clients stop after the pipeline has drained: sends of the drain still go out.
        let senders: [ServiceGroupConfiguration.ServiceConfiguration] =
            clients.apnsClients.map { .init(service: $0) } + (clients.fcm.map { [.init(service: $0)] } ?? [])
            + (clients.webPush.map { [.init(service: $0)] } ?? [])
        var groupConfiguration = ServiceGroupConfiguration(
            services: (tracing.map { [.init(service: $0.exporter)] } ?? []) + [
                .init(service: postgres),
                .init(service: housekeepingPostgres),
                // Needs only PostgreSQL: stops just before it.
                .init(service: housekeeping),
            ] + senders + [.init(service: clients.credentialsReloader)] + certificateWatch + [
                // Stopped after the pipeline has drained, so it answers throughout the drain.
                .init(service: database),
                .init(service: health),
                .init(service: producer),
                .init(service: consumer),
                .init(service: bulkConsumer),
                .init(service: pipeline),
                // Stopped first: tells the HTTP endpoints that the drain begins.
                .init(service: DrainAnnouncer(signal: drain)),
            ],
            gracefulShutdownSignals: [.sigterm, .sigint],
            cancellationSignals: [],
            logger: logger
        )
        groupConfiguration.maximumGracefulShutdownDuration = configuration.shutdownGracePeriod
        return ServiceGroup(configuration: groupConfiguration)
    }

    /// The watch of the TLS files the clients loaded at start (none when there are none): when one
    /// changes on disk, the group stops gracefully, to be started again with it.
    private static func certificateWatch(
        _ configuration: HeraldConfiguration,
        metricsFactory: any MetricsFactory,
        logger: Logger
    ) -> [ServiceGroupConfiguration.ServiceConfiguration] {
        let files = CertificateWatch.files(of: configuration)
        guard !files.isEmpty else { return [] }
        let watch = CertificateWatch(files: files, interval: configuration.credentialsCheckInterval, metricsFactory: metricsFactory, logger: logger)
        return [.init(service: watch, successTerminationBehavior: .gracefullyShutdownGroup)]
    }

    /// The APNs client's configuration: the configured one, or for an Android-only deployment (FCM
    /// configured, no APNs credential) one with no credential, which never connects (Apple
    /// devices then get `rejected` results, NoCredentialForTopic, as Android devices do without
    /// FCM); throws when no platform has a credential.
    private static func apnsConfiguration(_ configuration: HeraldConfiguration) throws -> APNSClientConfiguration {
        guard let apns = configuration.apns ?? configuration.fcm.map({ _ in APNSClientConfiguration(authentication: nil) }) else {
            throw ConfigurationError(
                "no credential: set HERALD_APNS_KEY_PATH, HERALD_APNS_KEY_ID and HERALD_APNS_TEAM_ID, HERALD_APNS_CERT_PATH, HERALD_CREDENTIALS_FILE, or an FCM service account (HERALD_FCM_SERVICE_ACCOUNT_PATH)"
            )
        }
        return apns
    }

    /// The pipeline's PostgreSQL pool, on `pipelineLoop`, and housekeeping's. The pipeline's
    /// queries are equality lookups and batched writes, planned generically so their plans do not
    /// depend on statistics; housekeeping deletes by age, which needs custom plans, on a pool of
    /// its own (its passes run one at a time).
    private static func makePostgresClients(
        _ configuration: HeraldConfiguration,
        pipelineLoop: any EventLoop,
        logger: Logger
    ) -> (pipeline: PostgresClient, housekeeping: PostgresClient) {
        let pipeline = PostgresClient(
            configuration: configuration.postgresURL.clientConfiguration(maximumConnections: configuration.postgresPoolSize, pipeline: true),
            eventLoopGroup: pipelineLoop,
            backgroundLogger: logger
        )
        let housekeeping = PostgresClient(
            configuration: configuration.postgresURL.clientConfiguration(maximumConnections: 2),
            backgroundLogger: logger
        )
        return (pipeline, housekeeping)
    }

    /// swift-otel's tracer and its OTLP exporter (a service that flushes when the group stops,
    /// so it runs first). Only traces: metrics go to /metrics and logs to the log handler.
    static func tracingBackend(logger: Logger) throws -> (tracer: any Tracer, exporter: any Service) {
        #if OTLPTracing
        var configuration = OTel.Configuration.default
        configuration.serviceName = "herald"
        configuration.diagnosticLogger = .custom(logger)
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        return (backend.factory, backend.service)
        #else
        throw ConfigurationError("HERALD_OTEL_TRACES: this build has no OTLP exporter (built without the OTLPTracing trait)")
        #endif
    }

    /// swift-metrics' factory over `registry`, with duration buckets from 250 µs (a stage on a
    /// healthy local network: Herald's own share of a notification is a few milliseconds, and its
    /// p50 and p99 must be readable) to 60 s (a delivery retried through an APNs outage).
    package static func metricsFactory(_ registry: PrometheusCollectorRegistry) -> PrometheusMetricsFactory {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500), .milliseconds(5),
            .milliseconds(10), .milliseconds(25), .milliseconds(50),
            .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5),
            .seconds(10), .seconds(30), .seconds(60),
        ]
        return factory
    }
}

/// librdkafka's consumer and producer are the pipeline's message source and publisher.
extension KafkaConsumer: MessageSource {}
extension KafkaProducer: MessagePublisher {}

/// PostgreSQL answered Herald's connection with an error: the server's SQLSTATE and message
/// (never the password).
struct PostgresRefused: Error, CustomStringConvertible {
    let url: PostgresURL
    let error: PSQLError

    var description: String {
        let state = error.serverInfo?[.sqlState] ?? "?"
        let message = error.serverInfo?[.message] ?? "no message"
        return "PostgreSQL at \(url) refused the connection: \(message) (SQLSTATE \(state))"
    }
}
