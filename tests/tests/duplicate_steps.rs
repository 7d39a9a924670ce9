//! Two different `#[step]` functions with one name: the registry refuses to be built, naming
//! both, so neither a client nor a worker can run with them. (A binary of its own: the
//! registrations are link-time and global to it.)

use tasks::{Client, Registry, RegistryError, Worker, WorkflowError, step};

mod billing {
    use super::*;

    #[step(name = "charge")]
    pub async fn charge(amount: u64) -> Result<u64, WorkflowError> {
        Ok(amount)
    }
}

mod shipping {
    use super::*;

    /// Named `charge` too: its records would share `charge`, `charge:1`, ... with the other.
    #[step(name = "charge")]
    pub async fn charge_shipping(amount: u64) -> Result<u64, WorkflowError> {
        Ok(amount + 5)
    }
}

#[tokio::test]
async fn two_steps_with_one_name_are_refused_naming_both() {
    // Outside a run they are plain functions, and both exist.
    assert_eq!(billing::charge(1).await.unwrap(), 1);
    assert_eq!(shipping::charge_shipping(1).await.unwrap(), 6);

    let error = Registry::from_inventory().unwrap_err();
    let message = error.to_string();
    match &error {
        RegistryError::DuplicateStep {
            name,
            first,
            second,
        } => {
            assert_eq!(*name, "charge");
            let mut modules = [first.module_path, second.module_path];
            modules.sort();
            assert_eq!(
                modules,
                ["duplicate_steps::billing", "duplicate_steps::shipping"]
            );
        }
        other => panic!("expected a duplicate step, got {other:?}"),
    }
    assert!(message.contains("duplicate_steps.rs"), "{message}");
    assert!(message.contains("another `name"), "{message}");

    let store = tasks::sqlite::SqliteStore::connect("sqlite::memory:")
        .await
        .unwrap();
    assert!(matches!(
        Client::new(store.clone()),
        Err(RegistryError::DuplicateStep { .. })
    ));
    assert!(Worker::builder(store).build().is_err());
}
