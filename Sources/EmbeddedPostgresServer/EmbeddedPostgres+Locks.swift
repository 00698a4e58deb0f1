import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

func flockRetryingOnInterrupt(_ descriptor: Int32, _ operation: Int32) -> Int32 {
    while true {
        let result = flock(descriptor, operation)
        if result == 0 || errno != EINTR { return result }
    }
}

private func openLockFile(_ path: String) throws -> Int32 {
    // O_CLOEXEC: the postmaster that pg_ctl forks must never inherit (and so keep) our locks.
    // O_NOFOLLOW and O_NONBLOCK, and a regular file only: the folder is the server account's,
    // and a link it put there made root create (or open) a file wherever it pointed; a FIFO
    // would have held the open for ever.
    let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
    guard descriptor >= 0 else {
        let reason = errno == ELOOP ? "it is a symbolic link" : String(cString: strerror(errno))
        throw EmbeddedPostgresError(
            .badDirectory, "could not open the lock file \(path) (\(reason)): remove it, or choose a folder this user can write")
    }
    var status = stat()
    guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
        _ = close(descriptor)
        throw EmbeddedPostgresError(.badDirectory, "the lock file \(path) is not a regular file: remove it, and run again")
    }
    return descriptor
}

extension EmbeddedPostgres {
    /// An exclusive flock held for the length of a scope (init.lock).
    struct FileLock: Sendable {
        private let descriptor: Int32

        /// Waits for the lock without holding a thread: another process may hold it for as long
        /// as an initdb takes, so it is tried without blocking (LOCK_NB) every 20 ms, a sleep
        /// between tries, rather than waited for on a cooperative thread.
        static func exclusive(path: String) async throws -> FileLock {
            let descriptor = try openLockFile(path)
            while flockRetryingOnInterrupt(descriptor, LOCK_EX | LOCK_NB) != 0 {
                guard errno == EWOULDBLOCK else {
                    let reason = String(cString: strerror(errno))
                    _ = close(descriptor)
                    throw EmbeddedPostgresError(.badDirectory, "could not lock \(path) (\(reason)): check the folder's file system supports flock")
                }
                do {
                    try await Task.sleep(for: .milliseconds(20))
                } catch {
                    _ = close(descriptor)
                    throw error
                }
            }
            return FileLock(descriptor: descriptor)
        }

        func release() {
            _ = close(descriptor)
        }
    }
}

extension EmbeddedPostgres {
    /// This process's share in a running server: a shared flock on users.lock, given up by `stop` (or
    /// when the last copy of the handle goes away, or when the process ends).
    final class Lease: Sendable {
        private let descriptor: Mutex<Int32>

        init(path: String) throws {
            let descriptor = try openLockFile(path)
            self.descriptor = Mutex(descriptor)
            if flockRetryingOnInterrupt(descriptor, LOCK_SH) != 0 {
                let reason = String(cString: strerror(errno))
                _ = close(descriptor)
                throw EmbeddedPostgresError(.badDirectory, "could not lock \(path) (\(reason)): check the folder's file system supports flock")
            }
        }

        /// The descriptor, once; nil after the first call.
        func take() -> Int32? {
            descriptor.withLock { descriptor in
                let taken = descriptor
                descriptor = -1
                return taken >= 0 ? taken : nil
            }
        }

        deinit {
            if let descriptor = take() { _ = close(descriptor) }
        }
    }
}
