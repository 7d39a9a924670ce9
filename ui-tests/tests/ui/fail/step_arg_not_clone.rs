use tasks::{step, WorkflowError};

struct Card {
    number: String,
}

#[step]
async fn charge(card: Card, amount: &mut u64) -> Result<u64, WorkflowError> {
    Ok(card.number.len() as u64 + *amount)
}

fn main() {}
