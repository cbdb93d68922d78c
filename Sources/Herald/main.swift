import ArgumentParser
import Foundation
import HeraldService
import Logging

/// `herald`: delivers Apple push notifications for events on Kafka.
@main
struct Herald: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Delivers Apple push notifications for notification events on Kafka.",
        discussion: "Configured by HERALD_* environment variables (see README.md).",
        subcommands: [Run.self, Migrate.self],
        defaultSubcommand: Run.self
    )

    /// Reads the configuration or exits with code 2 and one line naming the problem.
    static func loadConfiguration() -> HeraldConfiguration {
        do {
            let configuration = try HeraldConfiguration(environment: ProcessInfo.processInfo.environment)
            configuration.bootstrapLogging()
            for unknown in configuration.unknownKeys {
                Logger(label: "herald").warning("unknown configuration key ignored: \(unknown)")
            }
            return configuration
        } catch {
            FileHandle.standardError.write(Data("herald: configuration error: \(error)\n".utf8))
            Foundation.exit(2)
        }
    }

    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Run the service until SIGTERM or SIGINT.")

        func run() async throws {
            let configuration = Herald.loadConfiguration()
            let logger = Logger(label: "herald")
            do {
                try await HeraldApplication.run(configuration: configuration, logger: logger)
            } catch let error as ConfigurationError {
                FileHandle.standardError.write(Data("herald: configuration error: \(error)\n".utf8))
                throw ExitCode(2)
            }
        }
    }

    struct Migrate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Apply the PostgreSQL schema migrations.")

        func run() async throws {
            let configuration = Herald.loadConfiguration()
            try await HeraldApplication.migrate(configuration: configuration, logger: Logger(label: "herald.migrate"))
        }
    }
}
